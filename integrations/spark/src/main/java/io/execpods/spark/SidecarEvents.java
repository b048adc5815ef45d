package io.execpods.spark;

import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.IntConsumer;

import org.sparkproject.connect.grpc.ClientCall;
import org.sparkproject.connect.grpc.Status;
import org.sparkproject.connect.grpc.stub.StreamObserver;
import org.sparkproject.connect.protobuf.Descriptors.FieldDescriptor;
import org.sparkproject.connect.protobuf.DynamicMessage;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What the sidecar tells the driver on its stream, brought into Spark: each allocator notice
 * (a refused or throttled create, the allocation maximum, a failed create) at WARN in the
 * driver's log with the sidecar's message, and the application's failure (more executors failed
 * than {@code spark.executor.maxNumFailures} allows) the way Spark 4.3's own lifecycle manager
 * ends the application when its failure limit is hit: an ERROR naming the reason, then the
 * driver exits with {@code SparkExitCode.EXCEED_MAX_EXECUTOR_FAILURES} (11), which runs Spark's
 * shutdown hooks (the SparkContext stops, and with it the executors).
 *
 * <p>A stream that ends or fails (the sidecar restarting) is opened again after a second; a
 * sidecar that had already failed the application says so again on the new stream.
 */
final class SidecarEvents {
  /** Spark's {@code SparkExitCode.EXCEED_MAX_EXECUTOR_FAILURES}. */
  static final int EXCEED_MAX_EXECUTOR_FAILURES = 11;
  static final long BATCH_INTERVAL_MS = 1_000L;
  private static final long REOPEN_MS = 1_000L;
  private static final Logger LOG = LoggerFactory.getLogger(ExecPodsAllocator.class);

  private final SidecarClient client;
  private final String applicationId;
  private final IntConsumer exit;
  private final int maxFailures;
  private final ScheduledExecutorService reopen = Executors.newSingleThreadScheduledExecutor(
      runnable -> {
        Thread thread = new Thread(runnable, "execpods-events");
        thread.setDaemon(true);
        return thread;
      });
  private volatile ClientCall<DynamicMessage, DynamicMessage> call;
  private volatile boolean closed;
  private volatile boolean failed;
  private volatile boolean warnedLost;

  SidecarEvents(SidecarClient client, String applicationId, int maxFailures, IntConsumer exit) {
    this.client = client;
    this.applicationId = applicationId;
    this.maxFailures = maxFailures;
    this.exit = exit;
  }

  void start() {
    open();
  }

  private void open() {
    if (closed) {
      return;
    }
    call = client.follow(BATCH_INTERVAL_MS, new StreamObserver<DynamicMessage>() {
      @Override
      public void onNext(DynamicMessage message) {
        warnedLost = false;
        handle(message);
      }

      @Override
      public void onError(Throwable error) {
        if (closed) {
          return;
        }
        if (!warnedLost) {
          warnedLost = true;
          LOG.warn("execpods: lost the sidecar's event stream ({}); reopening it",
              Status.fromThrowable(error));
        }
        reopenLater();
      }

      @Override
      public void onCompleted() {
        reopenLater();
      }
    });
  }

  private void reopenLater() {
    if (!closed) {
      reopen.schedule(this::open, REOPEN_MS, TimeUnit.MILLISECONDS);
    }
  }

  void handle(DynamicMessage message) {
    FieldDescriptor notices =
        field(message, Contract.StreamSnapshotsResponse.ALLOCATOR_NOTICES);
    for (int i = 0; i < message.getRepeatedFieldCount(notices); i++) {
      DynamicMessage notice = (DynamicMessage) message.getRepeatedField(notices, i);
      LOG.warn("execpods: {} (resource profile {}): {}",
          kind(notice),
          notice.getField(field(notice, Contract.AllocatorNotice.RESOURCE_PROFILE_ID)),
          notice.getField(field(notice, Contract.AllocatorNotice.MESSAGE)));
    }
    String failure = (String) message.getField(
        field(message, Contract.StreamSnapshotsResponse.APPLICATION_FAILURE));
    if (!failure.isEmpty() && !failed && !closed) {
      failed = true;
      LOG.error("execpods: the sidecar failed application {}: {}", applicationId, failure);
      LOG.error("Max number of executor failures ({}) reached", maxFailures);
      // As Spark's stopApplication: sys.exit, from a thread of its own, so the shutdown hooks
      // (which stop this allocator over the same channel) never wait on this callback.
      Thread exiting = new Thread(
          () -> exit.accept(EXCEED_MAX_EXECUTOR_FAILURES), "execpods-application-failure");
      exiting.setDaemon(false);
      exiting.start();
    }
  }

  private static String kind(DynamicMessage notice) {
    Object value = notice.getField(field(notice, Contract.AllocatorNotice.KIND));
    String name = value.toString();
    return name.startsWith("KIND_") ? name.substring(5).toLowerCase().replace('_', ' ') : name;
  }

  private static FieldDescriptor field(DynamicMessage message, String name) {
    return SidecarClient.field(message.getDescriptorForType(), name);
  }

  void close() {
    closed = true;
    reopen.shutdownNow();
    ClientCall<DynamicMessage, DynamicMessage> current = call;
    if (current != null) {
      current.cancel("the allocator stops", null);
    }
  }
}
