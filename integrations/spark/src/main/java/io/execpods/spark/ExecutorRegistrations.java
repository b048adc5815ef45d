package io.execpods.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.spark.scheduler.cluster.k8s.KubernetesClusterSchedulerBackend;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Tells the sidecar which executors Spark's driver has registered, as they come and go.
 *
 * <p>The sidecar cannot see registrations: by default it counts every Running executor as known.
 * Reported in explicit mode ({@code UpdateDriverExecutors}), its view is Spark's own, so its
 * registration timeout ({@code spark.execpods.executor.registrationTimeout}, sent with every
 * report when set) replaces an executor whose pod runs but whose process never registered, and
 * an executor Spark no longer has is released (its end is expected). The registrations are read
 * from the scheduler backend ({@code getExecutorsWithRegistrationTs}, as Spark's executor-roll
 * plugin reads them) every interval; a report goes out only when they changed.
 */
final class ExecutorRegistrations implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(ExecutorRegistrations.class);

  private final SidecarClient client;
  private final KubernetesClusterSchedulerBackend backend;
  private final Long timeoutMs;
  private final ScheduledExecutorService timer;
  private Map<Long, Long> reported;
  private boolean warned;

  ExecutorRegistrations(
      SidecarClient client, KubernetesClusterSchedulerBackend backend, Long timeoutMs) {
    this.client = client;
    this.backend = backend;
    this.timeoutMs = timeoutMs;
    this.timer = Executors.newSingleThreadScheduledExecutor(runnable -> {
      Thread thread = new Thread(runnable, "execpods-executor-registrations");
      thread.setDaemon(true);
      return thread;
    });
  }

  void start(long intervalMs) {
    timer.scheduleWithFixedDelay(this::report, 0, intervalMs, TimeUnit.MILLISECONDS);
  }

  /** Spark's registered executors (id to registration time, ms); ids not numeric are skipped. */
  private Map<Long, Long> registered() {
    Map<Long, Long> now = new HashMap<>();
    Map<String, Object> times = CollectionConverters.asJava(backend.getExecutorsWithRegistrationTs());
    for (Map.Entry<String, Object> entry : times.entrySet()) {
      try {
        now.put(Long.parseLong(entry.getKey()), ((Number) entry.getValue()).longValue());
      } catch (NumberFormatException e) {
        // never an executor the sidecar made (Spark's driver id is "driver")
      }
    }
    return now;
  }

  synchronized void report() {
    try {
      Map<Long, Long> now = registered();
      if (reported != null && now.equals(reported)) {
        return;
      }
      List<Long> released = new ArrayList<>();
      if (reported != null) {
        for (Long id : reported.keySet()) {
          if (!now.containsKey(id)) {
            released.add(id);
          }
        }
      }
      client.updateDriverExecutors(now, released, timeoutMs);
      reported = now;
      warned = false;
    } catch (RuntimeException e) {
      if (!warned) {
        warned = true;
        LOG.warn("execpods: could not report the registered executors to the sidecar ({}); "
            + "retrying", e.toString());
      }
    }
  }

  @Override
  public void close() {
    timer.shutdownNow();
  }
}
