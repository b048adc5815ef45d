// Generated from proto/execpods/v1/allocator.proto by execpods.devtools.java_contract (python3 tools/dev.py gen). Do not edit.
package io.execpods.spark;

/** The names of the execpods contract ({@code execpods/v1/allocator.proto}). */
final class Contract {
  private Contract() {}

  static final String FILE = "execpods/v1/allocator.proto";
  static final String PACKAGE = "execpods.v1";
  /** A map field's entry: its key and value fields. */
  static final String MAP_KEY = "key";
  static final String MAP_VALUE = "value";
  /** Service ExecutorAllocator: its full name and its methods. */
  static final class ExecutorAllocator {
    private ExecutorAllocator() {}
    static final String NAME = "ExecutorAllocator";
    static final String FULL_NAME = "execpods.v1.ExecutorAllocator";
    static final String REQUEST_TOTAL = "RequestTotal";
    static final String KILL_EXECUTORS = "KillExecutors";
    static final String STREAM_SNAPSHOTS = "StreamSnapshots";
    static final String UPDATE_DRIVER_EXECUTORS = "UpdateDriverExecutors";
    static final String IS_DELETED = "IsDeleted";
  }
  /** Enum ExecutorState: its value names. */
  static final class ExecutorState {
    private ExecutorState() {}
    static final String NAME = "ExecutorState";
    static final String STATE_UNSPECIFIED = "STATE_UNSPECIFIED";
    static final String STATE_PENDING = "STATE_PENDING";
    static final String STATE_RUNNING = "STATE_RUNNING";
    static final String STATE_SUCCEEDED = "STATE_SUCCEEDED";
    static final String STATE_FAILED = "STATE_FAILED";
    static final String STATE_DELETED = "STATE_DELETED";
    static final String STATE_UNKNOWN = "STATE_UNKNOWN";
    static final String STATE_TERMINATING = "STATE_TERMINATING";
  }
  /** Enum PendingReason: its value names. */
  static final class PendingReason {
    private PendingReason() {}
    static final String NAME = "PendingReason";
    static final String PENDING_REASON_UNSPECIFIED = "PENDING_REASON_UNSPECIFIED";
    static final String PENDING_REASON_UNSCHEDULABLE = "PENDING_REASON_UNSCHEDULABLE";
    static final String PENDING_REASON_SCHEDULING_GATED = "PENDING_REASON_SCHEDULING_GATED";
    static final String PENDING_REASON_IMAGE_PULL = "PENDING_REASON_IMAGE_PULL";
    static final String PENDING_REASON_CONTAINER_CONFIG = "PENDING_REASON_CONTAINER_CONFIG";
    static final String PENDING_REASON_CRASH_LOOP = "PENDING_REASON_CRASH_LOOP";
    static final String PENDING_REASON_FAILED_MOUNT = "PENDING_REASON_FAILED_MOUNT";
  }
  /** Message RequestTotalRequest: its name and its fields' names. */
  static final class RequestTotalRequest {
    private RequestTotalRequest() {}
    static final String NAME = "RequestTotalRequest";
    static final String TOTAL = "total";
    static final String PROFILE_TOTALS = "profile_totals";
    static final String PROFILES = "profiles";
    static final String FAILURE_LIMIT = "failure_limit";
    static final String STOPPING = "stopping";
  }
  /** Message FailureLimit: its name and its fields' names. */
  static final class FailureLimit {
    private FailureLimit() {}
    static final String NAME = "FailureLimit";
    static final String MAX_FAILURES = "max_failures";
    static final String VALIDITY_INTERVAL_MS = "validity_interval_ms";
  }
  /** Message ResourceProfile: its name and its fields' names. */
  static final class ResourceProfile {
    private ResourceProfile() {}
    static final String NAME = "ResourceProfile";
    static final String ID = "id";
    static final String CORES = "cores";
    static final String MEMORY_MIB = "memory_mib";
    static final String MEMORY_OVERHEAD_MIB = "memory_overhead_mib";
    static final String EXTRA_RESOURCES = "extra_resources";
    static final String POD_TEMPLATE = "pod_template";
  }
  /** Message RequestTotalResponse: its name and its fields' names. */
  static final class RequestTotalResponse {
    private RequestTotalResponse() {}
    static final String NAME = "RequestTotalResponse";
    static final String TOTAL = "total";
    static final String RUNNING = "running";
    static final String PENDING = "pending";
    static final String PROFILE_TOTALS = "profile_totals";
  }
  /** Message KillExecutorsRequest: its name and its fields' names. */
  static final class KillExecutorsRequest {
    private KillExecutorsRequest() {}
    static final String NAME = "KillExecutorsRequest";
    static final String EXECUTOR_IDS = "executor_ids";
  }
  /** Message KillExecutorsResponse: its name and its fields' names. */
  static final class KillExecutorsResponse {
    private KillExecutorsResponse() {}
    static final String NAME = "KillExecutorsResponse";
    static final String DELETED_PODS = "deleted_pods";
  }
  /** Message StreamSnapshotsRequest: its name and its fields' names. */
  static final class StreamSnapshotsRequest {
    private StreamSnapshotsRequest() {}
    static final String NAME = "StreamSnapshotsRequest";
    static final String BATCH_INTERVAL_MS = "batch_interval_ms";
    static final String RESUME_FROM = "resume_from";
  }
  /** Message StreamPosition: its name and its fields' names. */
  static final class StreamPosition {
    private StreamPosition() {}
    static final String NAME = "StreamPosition";
    static final String INCARNATION = "incarnation";
    static final String SEQUENCE = "sequence";
  }
  /** Message StreamSnapshotsResponse: its name and its fields' names. */
  static final class StreamSnapshotsResponse {
    private StreamSnapshotsResponse() {}
    static final String NAME = "StreamSnapshotsResponse";
    static final String SNAPSHOTS = "snapshots";
    static final String REMOVED_EXECUTORS = "removed_executors";
    static final String ALLOCATOR_NOTICES = "allocator_notices";
    static final String APPLICATION_FAILURE = "application_failure";
    static final String POSITION = "position";
    static final String RESYNC = "resync";
  }
  /** Message AllocatorNotice: its name and its fields' names. */
  static final class AllocatorNotice {
    private AllocatorNotice() {}
    static final String NAME = "AllocatorNotice";
    static final String KIND = "kind";
    static final String MESSAGE = "message";
    static final String RESOURCE_PROFILE_ID = "resource_profile_id";
    static final String COUNT = "count";
    static final String RETRY_IN_MS = "retry_in_ms";
    static final String REASON = "reason";
    /** Enum Kind: its value names. */
    static final class Kind {
      private Kind() {}
      static final String NAME = "Kind";
      static final String KIND_UNSPECIFIED = "KIND_UNSPECIFIED";
      static final String KIND_CREATE_REFUSED = "KIND_CREATE_REFUSED";
      static final String KIND_CREATE_THROTTLED = "KIND_CREATE_THROTTLED";
      static final String KIND_CREATE_FAILED = "KIND_CREATE_FAILED";
      static final String KIND_ALLOCATION_MAXIMUM_REACHED = "KIND_ALLOCATION_MAXIMUM_REACHED";
      static final String KIND_ID_RESERVATION_FAILED = "KIND_ID_RESERVATION_FAILED";
      static final String KIND_RECOVERY_MODE = "KIND_RECOVERY_MODE";
      static final String KIND_NODE_BLOCKED = "KIND_NODE_BLOCKED";
      static final String KIND_NODE_UNBLOCKED = "KIND_NODE_UNBLOCKED";
      static final String KIND_QUOTA_EXCEEDED = "KIND_QUOTA_EXCEEDED";
      static final String KIND_QUOTA_CAP_LIFTED = "KIND_QUOTA_CAP_LIFTED";
      static final String KIND_ADMISSION_POLICY_REFUSED = "KIND_ADMISSION_POLICY_REFUSED";
      static final String KIND_PENDING_TIMEOUT = "KIND_PENDING_TIMEOUT";
      static final String KIND_CRASH_LOOP_PAUSED = "KIND_CRASH_LOOP_PAUSED";
      static final String KIND_CRASH_LOOP_RESUMED = "KIND_CRASH_LOOP_RESUMED";
      static final String KIND_FAILURE_RULE = "KIND_FAILURE_RULE";
      static final String KIND_ALLOCATION_STALLED = "KIND_ALLOCATION_STALLED";
      static final String KIND_ALLOCATION_RESUMED = "KIND_ALLOCATION_RESUMED";
      static final String KIND_ID_LEDGER_DISTRUSTED = "KIND_ID_LEDGER_DISTRUSTED";
    }
  }
  /** Message ExecutorPodsSnapshot: its name and its fields' names. */
  static final class ExecutorPodsSnapshot {
    private ExecutorPodsSnapshot() {}
    static final String NAME = "ExecutorPodsSnapshot";
    static final String EXECUTOR_PODS = "executor_pods";
    static final String FULL_SNAPSHOT_TS_MS = "full_snapshot_ts_ms";
    static final String FULL = "full";
  }
  /** Message ObservedPod: its name and its fields' names. */
  static final class ObservedPod {
    private ObservedPod() {}
    static final String NAME = "ObservedPod";
    static final String STATE = "state";
    static final String POD_NAME = "pod_name";
    static final String PHASE = "phase";
    static final String EXIT_CODE = "exit_code";
    static final String REASON = "reason";
    static final String MESSAGE = "message";
    static final String NODE_NAME = "node_name";
    static final String POD_IP = "pod_ip";
    static final String CONTAINER_REASON = "container_reason";
    static final String PENDING_REASON = "pending_reason";
    static final String PENDING_MESSAGE = "pending_message";
  }
  /** Message ExecutorRemoved: its name and its fields' names. */
  static final class ExecutorRemoved {
    private ExecutorRemoved() {}
    static final String NAME = "ExecutorRemoved";
    static final String EXECUTOR_ID = "executor_id";
    static final String EXIT_CODE = "exit_code";
    static final String EXIT_CAUSED_BY_APP = "exit_caused_by_app";
    static final String MESSAGE = "message";
    static final String KILLED_BY_DRIVER = "killed_by_driver";
  }
  /** Message UpdateDriverExecutorsRequest: its name and its fields' names. */
  static final class UpdateDriverExecutorsRequest {
    private UpdateDriverExecutorsRequest() {}
    static final String NAME = "UpdateDriverExecutorsRequest";
    static final String REGISTERED = "registered";
    static final String RELEASED = "released";
    static final String EXPLICIT = "explicit";
    static final String REGISTERED_AT_MS = "registered_at_ms";
    static final String REGISTRATION_TIMEOUT_MS = "registration_timeout_ms";
  }
  /** Message UpdateDriverExecutorsResponse: its name and its fields' names. */
  static final class UpdateDriverExecutorsResponse {
    private UpdateDriverExecutorsResponse() {}
    static final String NAME = "UpdateDriverExecutorsResponse";
    static final String KNOWN = "known";
  }
  /** Message IsDeletedRequest: its name and its fields' names. */
  static final class IsDeletedRequest {
    private IsDeletedRequest() {}
    static final String NAME = "IsDeletedRequest";
    static final String EXECUTOR_ID = "executor_id";
  }
  /** Message IsDeletedResponse: its name and its fields' names. */
  static final class IsDeletedResponse {
    private IsDeletedResponse() {}
    static final String NAME = "IsDeletedResponse";
    static final String DELETED = "deleted";
  }
}
