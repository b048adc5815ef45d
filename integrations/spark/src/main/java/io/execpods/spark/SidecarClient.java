package io.execpods.spark;

import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.sparkproject.connect.grpc.CallOptions;
import org.sparkproject.connect.grpc.Channel;
import org.sparkproject.connect.grpc.ChannelCredentials;
import org.sparkproject.connect.grpc.ClientCall;
import org.sparkproject.connect.grpc.ClientInterceptors;
import org.sparkproject.connect.grpc.ManagedChannel;
import org.sparkproject.connect.grpc.MethodDescriptor;
import org.sparkproject.connect.grpc.netty.NettyChannelBuilder;
import org.sparkproject.connect.grpc.protobuf.ProtoUtils;
import org.sparkproject.connect.grpc.stub.ClientCalls;
import org.sparkproject.connect.grpc.stub.StreamObserver;
import org.sparkproject.connect.protobuf.DescriptorProtos.FileDescriptorProto;
import org.sparkproject.connect.protobuf.DescriptorProtos.FileDescriptorSet;
import org.sparkproject.connect.protobuf.Descriptors;
import org.sparkproject.connect.protobuf.Descriptors.Descriptor;
import org.sparkproject.connect.protobuf.Descriptors.FieldDescriptor;
import org.sparkproject.connect.protobuf.DynamicMessage;

/**
 * The execpods sidecar's gRPC contract, spoken with the gRPC and protobuf runtimes that Spark
 * already ships (relocated inside its spark-connect jar), so the plugin adds no library.
 *
 * <p>There is no Java code generator for the contract here, so the messages are {@link
 * DynamicMessage}s over the descriptors of {@code proto/execpods/v1/allocator.proto}, which the
 * build compiles into the jar ({@code allocator.desc}). That also frees the plugin from
 * protobuf's gencode/runtime version check: the descriptors are data, valid for any runtime.
 */
final class SidecarClient implements AutoCloseable {
  private static final String DESCRIPTORS = "/io/execpods/spark/allocator.desc";

  private final ManagedChannel managed;
  /** The managed channel with the bearer token added to every call. */
  private final Channel channel;
  private final SidecarSecurity security;
  private final long deadlineMs;
  private final Map<String, MethodDescriptor<DynamicMessage, DynamicMessage>> methods;
  private final Descriptors.FileDescriptor contract;

  /**
   * A client of the sidecar at {@code target} ("host:port") over plaintext, TLS or mutual TLS,
   * with a bearer token or not ({@code security}); calls wait for it up to {@code deadlineMs}.
   */
  SidecarClient(String target, long deadlineMs, SidecarSecurity security) {
    this.contract = loadContract();
    this.deadlineMs = deadlineMs;
    this.security = security;
    ChannelCredentials credentials = security.credentials();
    NettyChannelBuilder builder = credentials == null
        ? NettyChannelBuilder.forTarget(target).usePlaintext()
        : NettyChannelBuilder.forTarget(target, credentials);
    if (security.authority != null) {
      builder.overrideAuthority(security.authority);
    }
    this.managed = builder.build();
    this.channel = ClientInterceptors.intercept(managed, security.bearer());
    Descriptors.ServiceDescriptor service =
        contract.findServiceByName(Contract.ExecutorAllocator.NAME);
    Map<String, MethodDescriptor<DynamicMessage, DynamicMessage>> byName = new HashMap<>();
    for (Descriptors.MethodDescriptor method : service.getMethods()) {
      byName.put(
          method.getName(),
          MethodDescriptor.<DynamicMessage, DynamicMessage>newBuilder()
              .setType(
                  method.isServerStreaming()
                      ? MethodDescriptor.MethodType.SERVER_STREAMING
                      : MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(MethodDescriptor.generateFullMethodName(
                  Contract.ExecutorAllocator.FULL_NAME, method.getName()))
              .setRequestMarshaller(
                  ProtoUtils.marshaller(DynamicMessage.getDefaultInstance(method.getInputType())))
              .setResponseMarshaller(
                  ProtoUtils.marshaller(DynamicMessage.getDefaultInstance(method.getOutputType())))
              .build());
    }
    this.methods = byName;
  }

  static Descriptors.FileDescriptor loadContract() {
    try (InputStream in = SidecarClient.class.getResourceAsStream(DESCRIPTORS)) {
      if (in == null) {
        throw new IllegalStateException(DESCRIPTORS + " is missing from the plugin jar");
      }
      FileDescriptorSet set = FileDescriptorSet.parseFrom(in);
      // The set is in dependency order (protoc --include_imports); allocator.proto imports nothing.
      Map<String, Descriptors.FileDescriptor> built = new HashMap<>();
      Descriptors.FileDescriptor last = null;
      for (FileDescriptorProto file : set.getFileList()) {
        List<Descriptors.FileDescriptor> deps = new ArrayList<>();
        for (String dependency : file.getDependencyList()) {
          deps.add(built.get(dependency));
        }
        last = Descriptors.FileDescriptor.buildFrom(
            file, deps.toArray(new Descriptors.FileDescriptor[0]));
        built.put(file.getName(), last);
      }
      Descriptors.FileDescriptor allocator = built.get(Contract.FILE);
      return allocator != null ? allocator : last;
    } catch (IOException | Descriptors.DescriptorValidationException e) {
      throw new IllegalStateException("cannot load the execpods contract: " + e, e);
    }
  }

  Descriptor type(String name) {
    Descriptor found = contract.findMessageTypeByName(name);
    if (found == null) {
      throw new IllegalStateException("the execpods contract has no message " + name);
    }
    return found;
  }

  private DynamicMessage unary(String method, DynamicMessage request) {
    CallOptions options = CallOptions.DEFAULT
        .withWaitForReady()
        .withDeadlineAfter(deadlineMs, TimeUnit.MILLISECONDS);
    return ClientCalls.blockingUnaryCall(channel, methods.get(method), options, request);
  }

  /** One resource profile's declaration; zero or empty fields take the sidecar's settings. */
  static final class Profile {
    final int id;
    final int cores;
    final long memoryMib;
    final long memoryOverheadMib;
    final String podTemplate;

    Profile(int id, int cores, long memoryMib, long memoryOverheadMib, String podTemplate) {
      this.id = id;
      this.cores = cores;
      this.memoryMib = memoryMib;
      this.memoryOverheadMib = memoryOverheadMib;
      this.podTemplate = podTemplate;
    }
  }

  /**
   * RequestTotal: {@code defaultTotal} for profile 0, {@code others} by profile id, declaring
   * {@code profiles} first. Returns the targets in force, by profile id.
   */
  Map<Integer, Integer> requestTotal(
      int defaultTotal, Map<Integer, Integer> others, List<Profile> profiles) {
    return requestTotal(defaultTotal, others, profiles, -1, 0);
  }

  /**
   * RequestTotal carrying the driver's executor failure limit ({@code maxFailures}, not sent
   * when negative) and window ({@code validityMs}, 0 = failures always count).
   */
  Map<Integer, Integer> requestTotal(
      int defaultTotal, Map<Integer, Integer> others, List<Profile> profiles,
      int maxFailures, long validityMs) {
    Descriptor requestType = type(Contract.RequestTotalRequest.NAME);
    DynamicMessage.Builder request = DynamicMessage.newBuilder(requestType);
    request.setField(field(requestType, Contract.RequestTotalRequest.TOTAL), defaultTotal);
    if (maxFailures >= 0) {
      Descriptor limitType = type(Contract.FailureLimit.NAME);
      request.setField(field(requestType, Contract.RequestTotalRequest.FAILURE_LIMIT),
          DynamicMessage.newBuilder(limitType)
              .setField(field(limitType, Contract.FailureLimit.MAX_FAILURES), maxFailures)
              .setField(field(limitType, Contract.FailureLimit.VALIDITY_INTERVAL_MS), validityMs)
              .build());
    }
    FieldDescriptor totals = field(requestType, Contract.RequestTotalRequest.PROFILE_TOTALS);
    for (Map.Entry<Integer, Integer> entry : others.entrySet()) {
      request.addRepeatedField(totals, mapEntry(totals, entry.getKey(), entry.getValue()));
    }
    Descriptor profileType = type(Contract.ResourceProfile.NAME);
    FieldDescriptor declared = field(requestType, Contract.RequestTotalRequest.PROFILES);
    for (Profile profile : profiles) {
      DynamicMessage.Builder message = DynamicMessage.newBuilder(profileType);
      message.setField(field(profileType, Contract.ResourceProfile.ID), profile.id);
      message.setField(field(profileType, Contract.ResourceProfile.CORES), profile.cores);
      message.setField(
          field(profileType, Contract.ResourceProfile.MEMORY_MIB), profile.memoryMib);
      message.setField(field(profileType, Contract.ResourceProfile.MEMORY_OVERHEAD_MIB),
          profile.memoryOverheadMib);
      message.setField(
          field(profileType, Contract.ResourceProfile.POD_TEMPLATE), profile.podTemplate);
      request.addRepeatedField(declared, message.build());
    }
    DynamicMessage response = unary(Contract.ExecutorAllocator.REQUEST_TOTAL, request.build());
    Map<Integer, Integer> inForce = new HashMap<>();
    FieldDescriptor field = field(
        response.getDescriptorForType(), Contract.RequestTotalResponse.PROFILE_TOTALS);
    for (int i = 0; i < response.getRepeatedFieldCount(field); i++) {
      DynamicMessage entry = (DynamicMessage) response.getRepeatedField(field, i);
      inForce.put((Integer) entryKey(entry), (Integer) entryValue(entry));
    }
    return inForce;
  }

  /**
   * RequestTotal with {@code stopping}: the application's allocation ends for good (Spark's
   * {@code ExecutorPodsAllocator.stop}): every total drops to 0, no executor is created again,
   * and the sidecar leaves its id ledger to Spark's clean-up of the executor ConfigMaps.
   */
  void stopAllocation() {
    Descriptor requestType = type(Contract.RequestTotalRequest.NAME);
    DynamicMessage request = DynamicMessage.newBuilder(requestType)
        .setField(field(requestType, Contract.RequestTotalRequest.STOPPING), true)
        .build();
    unary(Contract.ExecutorAllocator.REQUEST_TOTAL, request);
  }

  /** IsDeleted: whether the sidecar deleted this executor while scaling down. */
  boolean isDeleted(long executorId) {
    Descriptor requestType = type(Contract.IsDeletedRequest.NAME);
    DynamicMessage request = DynamicMessage.newBuilder(requestType)
        .setField(field(requestType, Contract.IsDeletedRequest.EXECUTOR_ID), executorId)
        .build();
    DynamicMessage response = unary(Contract.ExecutorAllocator.IS_DELETED, request);
    return (Boolean) response.getField(
        field(response.getDescriptorForType(), Contract.IsDeletedResponse.DELETED));
  }

  /**
   * UpdateDriverExecutors in explicit mode: the executors the driver has registered (with when,
   * ms since the epoch) and those it no longer counts on; {@code timeoutMs}, when not null, is
   * the registration timeout (0 turns it off). Returns the executors the sidecar now knows.
   */
  List<Long> updateDriverExecutors(
      Map<Long, Long> registeredAtMs, List<Long> released, Long timeoutMs) {
    Descriptor requestType = type(Contract.UpdateDriverExecutorsRequest.NAME);
    DynamicMessage.Builder request = DynamicMessage.newBuilder(requestType);
    FieldDescriptor registered =
        field(requestType, Contract.UpdateDriverExecutorsRequest.REGISTERED);
    FieldDescriptor times =
        field(requestType, Contract.UpdateDriverExecutorsRequest.REGISTERED_AT_MS);
    for (Map.Entry<Long, Long> entry : registeredAtMs.entrySet()) {
      request.addRepeatedField(registered, entry.getKey());
      request.addRepeatedField(times, mapEntry(times, entry.getKey(), entry.getValue()));
    }
    FieldDescriptor releasedField =
        field(requestType, Contract.UpdateDriverExecutorsRequest.RELEASED);
    for (Long id : released) {
      request.addRepeatedField(releasedField, id);
    }
    request.setField(field(requestType, Contract.UpdateDriverExecutorsRequest.EXPLICIT), true);
    if (timeoutMs != null) {
      request.setField(field(requestType,
          Contract.UpdateDriverExecutorsRequest.REGISTRATION_TIMEOUT_MS), timeoutMs);
    }
    DynamicMessage response =
        unary(Contract.ExecutorAllocator.UPDATE_DRIVER_EXECUTORS, request.build());
    FieldDescriptor known = field(
        response.getDescriptorForType(), Contract.UpdateDriverExecutorsResponse.KNOWN);
    List<Long> ids = new ArrayList<>();
    for (int i = 0; i < response.getRepeatedFieldCount(known); i++) {
      ids.add((Long) response.getRepeatedField(known, i));
    }
    return ids;
  }

  /**
   * Follows StreamSnapshots in the background: {@code observer} gets each message (notices,
   * the application's failure). Snapshots come at most every {@code batchIntervalMs}. Returns
   * the call, to cancel it.
   */
  ClientCall<DynamicMessage, DynamicMessage> follow(
      long batchIntervalMs, StreamObserver<DynamicMessage> observer) {
    Descriptor requestType = type(Contract.StreamSnapshotsRequest.NAME);
    DynamicMessage request = DynamicMessage.newBuilder(requestType)
        .setField(field(requestType, Contract.StreamSnapshotsRequest.BATCH_INTERVAL_MS),
            batchIntervalMs)
        .build();
    ClientCall<DynamicMessage, DynamicMessage> call = channel.newCall(
        methods.get(Contract.ExecutorAllocator.STREAM_SNAPSHOTS),
        CallOptions.DEFAULT.withWaitForReady());
    ClientCalls.asyncServerStreamingCall(call, request, observer);
    return call;
  }

  SidecarSecurity security() {
    return security;
  }

  /**
   * The field {@code name} of {@code type}: the names are {@link Contract}'s, generated from the
   * proto at build time, so a renamed field fails the build; a descriptor packed from another
   * proto than the plugin was compiled with fails here, naming the field.
   */
  static FieldDescriptor field(Descriptor type, String name) {
    FieldDescriptor found = type.findFieldByName(name);
    if (found == null) {
      throw new IllegalStateException(
          "the execpods contract has no field " + type.getName() + "." + name);
    }
    return found;
  }

  private static DynamicMessage mapEntry(FieldDescriptor mapField, Object key, Object value) {
    Descriptor entryType = mapField.getMessageType();
    return DynamicMessage.newBuilder(entryType)
        .setField(field(entryType, Contract.MAP_KEY), key)
        .setField(field(entryType, Contract.MAP_VALUE), value)
        .build();
  }

  private static Object entryKey(DynamicMessage entry) {
    return entry.getField(field(entry.getDescriptorForType(), Contract.MAP_KEY));
  }

  private static Object entryValue(DynamicMessage entry) {
    return entry.getField(field(entry.getDescriptorForType(), Contract.MAP_VALUE));
  }

  @Override
  public void close() {
    managed.shutdown();
    try {
      if (!managed.awaitTermination(5, TimeUnit.SECONDS)) {
        managed.shutdownNow();
      }
    } catch (InterruptedException e) {
      managed.shutdownNow();
      Thread.currentThread().interrupt();
    } finally {
      security.close();
    }
  }
}
