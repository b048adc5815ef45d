package io.execpods.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import io.fabric8.kubernetes.api.model.Container;
import io.fabric8.kubernetes.api.model.EnvVar;
import io.fabric8.kubernetes.api.model.HasMetadata;
import io.fabric8.kubernetes.api.model.Pod;
import io.fabric8.kubernetes.api.model.Quantity;
import io.fabric8.kubernetes.client.KubernetesClient;
import io.fabric8.kubernetes.client.utils.Serialization;
import org.apache.spark.SecurityManager;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkException;
import org.apache.spark.deploy.k8s.Constants$;
import org.apache.spark.deploy.k8s.KubernetesConf$;
import org.apache.spark.deploy.k8s.KubernetesExecutorConf;
import org.apache.spark.deploy.k8s.KubernetesExecutorSpec;
import org.apache.spark.resource.ResourceProfile;
import org.apache.spark.scheduler.cluster.k8s.AbstractPodsAllocator;
import org.apache.spark.scheduler.cluster.k8s.ExecutorPodsSnapshotsStore;
import org.apache.spark.scheduler.cluster.k8s.KubernetesClusterSchedulerBackend;
import org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBuilder;
import org.apache.spark.util.Clock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark's executor-pod allocation delegated to an execpods sidecar beside the driver.
 *
 * <p>Selected with {@code spark.kubernetes.allocation.pods.allocator=io.execpods.spark.ExecPodsAllocator}.
 * Spark keeps its watch, poll, snapshots and lifecycle manager; only the creation of executor
 * pods (and the deletion of surplus pending ones when the target drops) moves to the sidecar. For
 * every resource profile the executor pod is built here, with Spark's own {@link
 * KubernetesExecutorBuilder}, and declared to the sidecar as that profile's pod template, so the
 * driver URL, environment, volumes, user pod template and resources are Spark's; the sidecar gives
 * each pod its executor id (name, labels, {@code SPARK_EXECUTOR_ID}, hostname).
 */
public class ExecPodsAllocator extends AbstractPodsAllocator {
  /** The sidecar's gRPC address, "host:port". */
  public static final String SIDECAR_ADDRESS = "spark.execpods.sidecar.address";
  public static final String DEFAULT_SIDECAR_ADDRESS = "127.0.0.1:50551";
  /** How long one call to the sidecar may take, waiting for it to be ready included (ms). */
  public static final String SIDECAR_DEADLINE = "spark.execpods.sidecar.deadlineMs";
  public static final long DEFAULT_SIDECAR_DEADLINE_MS = 30_000L;
  /**
   * How long an executor may run without registering with the driver before the sidecar deletes
   * and replaces it (the sidecar's execpods.executor.registrationTimeout); unset: the sidecar's.
   */
  public static final String REGISTRATION_TIMEOUT = "spark.execpods.executor.registrationTimeout";
  /** How often the driver's registered executors are compared with the last report (ms). */
  public static final String REGISTRATIONS_INTERVAL = "spark.execpods.registrations.intervalMs";
  public static final long DEFAULT_REGISTRATIONS_INTERVAL_MS = 1_000L;
  /** Spark's executor failure limit and window, sent to the sidecar so the two agree. */
  static final String MAX_FAILURES = "spark.executor.maxNumFailures";
  static final String FAILURES_VALIDITY = "spark.executor.failuresValidityInterval";
  /**
   * The executor id Spark's builder is given for a profile's template. The sidecar replaces it
   * with each executor's own id wherever Spark puts one (name, labels, environment, hostname).
   */
  static final String TEMPLATE_EXECUTOR_ID = "0";
  /** The template annotation that carries the executor's OnDemand claims to the sidecar. */
  static final String CLAIMS_ANNOTATION = "execpods.io/executor-claims";

  private static final Logger LOG = LoggerFactory.getLogger(ExecPodsAllocator.class);
  private static final int DEFAULT_PROFILE_ID = ResourceProfile.DEFAULT_RESOURCE_PROFILE_ID();

  private final SparkConf conf;
  private final SecurityManager secMgr;
  private final KubernetesExecutorBuilder executorBuilder;
  private final KubernetesClient kubernetesClient;
  private final String namespace;
  private final boolean deleteOnTermination;
  private final Option<Pod> driverPod;
  /**
   * Each profile's declaration, built once. Every RequestTotal carries the declarations of the
   * profiles it names: declaring a known profile again with the same shape is a no-op for the
   * sidecar, and a restarted sidecar learns them again without a round of errors.
   */
  private final Map<Integer, SidecarClient.Profile> declarations = new HashMap<>();
  /** Every profile's last total, so stop() can zero them all. */
  private final Map<Integer, Integer> totals = new HashMap<>();
  private volatile SidecarClient sidecar;
  private volatile SidecarEvents events;
  private volatile ExecutorRegistrations registrations;
  private volatile String applicationId;
  private final int maxFailures;
  private final long failuresValidityMs;

  public ExecPodsAllocator(
      SparkConf conf,
      SecurityManager secMgr,
      KubernetesExecutorBuilder executorBuilder,
      KubernetesClient kubernetesClient,
      ExecutorPodsSnapshotsStore snapshotsStore,
      Clock clock) {
    this.conf = conf;
    this.secMgr = secMgr;
    this.executorBuilder = executorBuilder;
    this.kubernetesClient = kubernetesClient;
    this.namespace = conf.get("spark.kubernetes.namespace", "default");
    this.deleteOnTermination =
        conf.getBoolean("spark.kubernetes.executor.deleteOnTermination", true);
    this.driverPod = lookUpDriverPod();
    // Spark's own limit, exactly as its lifecycle manager computes it (ExecutorFailureTracker).
    this.maxFailures =
        org.apache.spark.deploy.ExecutorFailureTracker$.MODULE$.maxNumExecutorFailures(conf);
    this.failuresValidityMs = conf.contains(FAILURES_VALIDITY)
        ? conf.getTimeAsMs(FAILURES_VALIDITY) : 0L;
  }

  /** The driver pod named by spark.kubernetes.driver.pod.name, as Spark's own allocator. */
  private Option<Pod> lookUpDriverPod() {
    Option<String> name = conf.getOption("spark.kubernetes.driver.pod.name");
    if (name.isEmpty()) {
      return Option.empty();
    }
    Pod pod = kubernetesClient.pods().inNamespace(namespace).withName(name.get()).get();
    if (pod == null) {
      throw new RuntimeException(new SparkException(
          "No pod was found named " + name.get() + " in the cluster in the namespace "
              + namespace + " (this was supposed to be the driver pod.)."));
    }
    return Option.apply(pod);
  }

  @Override
  public Option<Pod> driverPod() {
    return driverPod;
  }

  @Override
  public void start(String applicationId, KubernetesClusterSchedulerBackend schedulerBackend) {
    this.applicationId = applicationId;
    String address = conf.get(SIDECAR_ADDRESS, DEFAULT_SIDECAR_ADDRESS);
    long timeout = conf.getLong(SIDECAR_DEADLINE, DEFAULT_SIDECAR_DEADLINE_MS);
    SidecarSecurity security = new SidecarSecurity(conf);
    SidecarClient client = new SidecarClient(address, timeout, security);
    try {
      client.isDeleted(1); // reachable and authorized now, or Spark's start fails with the reason
    } catch (RuntimeException e) {
      client.close();
      throw SidecarErrors.explain(e, address, security);
    }
    this.sidecar = client;
    SidecarEvents following =
        new SidecarEvents(client, applicationId, maxFailures, ExecPodsAllocator::exit);
    following.start();
    this.events = following;
    Long timeoutMs = conf.contains(REGISTRATION_TIMEOUT)
        ? conf.getTimeAsMs(REGISTRATION_TIMEOUT) : null;
    ExecutorRegistrations reporting =
        new ExecutorRegistrations(client, schedulerBackend, timeoutMs);
    reporting.start(conf.getLong(REGISTRATIONS_INTERVAL, DEFAULT_REGISTRATIONS_INTERVAL_MS));
    this.registrations = reporting;
    LOG.info("execpods: executor pods of {} are allocated by the sidecar at {} ({}{}); "
            + "executor failure limit {} ({})",
        applicationId, address, security.tls ? (security.certFile != null ? "mutual TLS" : "TLS")
            : "plaintext", security.hasToken() ? ", bearer token" : "", maxFailures,
        failuresValidityMs > 0 ? "within " + failuresValidityMs + " ms" : "in total");
  }

  /** Spark's stopApplication: {@code sys.exit(code)}, which runs Spark's shutdown hooks. */
  private static void exit(int code) {
    System.exit(code);
  }

  @Override
  public synchronized void setTotalExpectedExecutors(
      scala.collection.immutable.Map<ResourceProfile, Object> resourceProfileToTotalExecs) {
    SidecarClient client = requireStarted();
    Map<ResourceProfile, Object> asked = CollectionConverters.asJava(resourceProfileToTotalExecs);
    List<SidecarClient.Profile> toDeclare = new ArrayList<>();
    Map<Integer, Integer> others = new HashMap<>();
    for (Map.Entry<ResourceProfile, Object> entry : asked.entrySet()) {
      ResourceProfile profile = entry.getKey();
      int total = ((Number) entry.getValue()).intValue();
      toDeclare.add(declarations.computeIfAbsent(profile.id(), id -> declaration(profile)));
      if (profile.id() != DEFAULT_PROFILE_ID) {
        others.put(profile.id(), total);
      }
      totals.put(profile.id(), total);
    }
    int defaultTotal = totals.getOrDefault(DEFAULT_PROFILE_ID, 0);
    Map<Integer, Integer> inForce;
    try {
      inForce = client.requestTotal(
          defaultTotal, others, toDeclare, maxFailures, failuresValidityMs);
    } catch (RuntimeException e) {
      throw SidecarErrors.explain(
          e, conf.get(SIDECAR_ADDRESS, DEFAULT_SIDECAR_ADDRESS), client.security());
    }
    LOG.debug("execpods: targets by resource profile now {}", inForce);
  }

  /** The profile's executor pod as Spark builds it, declared as the profile's pod template. */
  private SidecarClient.Profile declaration(ResourceProfile profile) {
    KubernetesExecutorConf executorConf = KubernetesConf$.MODULE$.createExecutorConf(
        conf.clone(), TEMPLATE_EXECUTOR_ID, applicationId, driverPod, profile.id());
    KubernetesExecutorSpec spec =
        executorBuilder.buildFromFeatures(executorConf, secMgr, kubernetesClient, profile);
    Container container = spec.pod().container();
    Pod pod = new io.fabric8.kubernetes.api.model.PodBuilder(spec.pod().pod())
        .editOrNewSpec()
        .addToContainers(0, container)
        .endSpec()
        .build();
    withClaims(pod, CollectionConverters.asJava(spec.executorKubernetesResources()));
    int cores = parseCores(env(container, "SPARK_EXECUTOR_CORES"));
    long memoryMib = parseMib(env(container, "SPARK_EXECUTOR_MEMORY"));
    long podMemoryMib = 0;
    Quantity requested = container.getResources() == null
        ? null : container.getResources().getRequests().get("memory");
    if (requested != null) {
      podMemoryMib = Quantity.getAmountInBytes(requested).longValue() / (1024L * 1024L);
    }
    long overheadMib = podMemoryMib > memoryMib ? podMemoryMib - memoryMib : 0;
    return new SidecarClient.Profile(
        profile.id(), cores, memoryMib, overheadMib, Serialization.asJson(pod));
  }

  /**
   * The executor's OnDemand PersistentVolumeClaims (Spark's MountVolumesFeatureStep makes them,
   * named for executor {@value #TEMPLATE_EXECUTOR_ID}) travel with the template in the annotation
   * {@value #CLAIMS_ANNOTATION}: the sidecar makes each executor's own claims from them, and
   * owns and reuses them as Spark's allocator would. Other extra resources are not created.
   */
  private static void withClaims(Pod pod, List<HasMetadata> resources) {
    List<HasMetadata> claims = new ArrayList<>();
    for (HasMetadata resource : resources) {
      if ("PersistentVolumeClaim".equals(resource.getKind())) {
        claims.add(resource);
      } else {
        LOG.warn("execpods: the executor's extra Kubernetes resource {} {} is not created by the "
            + "sidecar", resource.getKind(), resource.getMetadata().getName());
      }
    }
    if (!claims.isEmpty()) {
      if (pod.getMetadata().getAnnotations() == null) {
        pod.getMetadata().setAnnotations(new HashMap<>());
      }
      pod.getMetadata().getAnnotations().put(CLAIMS_ANNOTATION, Serialization.asJson(claims));
    }
  }

  private static String env(Container container, String name) {
    for (EnvVar var : container.getEnv()) {
      if (name.equals(var.getName()) && var.getValue() != null) {
        return var.getValue();
      }
    }
    return null;
  }

  private static int parseCores(String value) {
    try {
      return value == null ? 0 : Integer.parseInt(value.trim());
    } catch (NumberFormatException e) {
      return 0;
    }
  }

  /** Spark's "1024m" (as BasicExecutorFeatureStep writes SPARK_EXECUTOR_MEMORY) in MiB. */
  private static long parseMib(String value) {
    if (value == null || value.isEmpty()) {
      return 0;
    }
    try {
      String digits = value.trim().toLowerCase();
      if (digits.endsWith("m")) {
        return Long.parseLong(digits.substring(0, digits.length() - 1));
      }
      if (digits.endsWith("g")) {
        return Long.parseLong(digits.substring(0, digits.length() - 1)) * 1024L;
      }
      return Long.parseLong(digits) / (1024L * 1024L);
    } catch (NumberFormatException e) {
      return 0;
    }
  }

  @Override
  public boolean isDeleted(String executorId) {
    SidecarClient client = sidecar;
    if (client == null) {
      return false;
    }
    long id;
    try {
      id = Long.parseLong(executorId);
    } catch (NumberFormatException e) {
      return false; // never an id the sidecar issued
    }
    return client.isDeleted(id);
  }

  /**
   * Stops the application's allocation, as Spark's own {@code ExecutorPodsAllocator.stop} does:
   * a RequestTotal with {@code stopping} drops every profile's target to zero at the sidecar for
   * good (no more creates; the sidecar leaves its id ledger, a ConfigMap labelled as the
   * executors' ones in client mode, to Spark's clean-up right after this), then, when
   * spark.kubernetes.executor.deleteOnTermination holds (Spark's default), one delete of the
   * application's executor pods by label, each with its own grace period; otherwise their pods
   * are left, as Spark leaves them. (Spark 4.3 calls this only when that property holds; the
   * check keeps the promise for any caller.) Nothing is marked: Spark's stop labels no pod and
   * sets no deletion cost. A create the sidecar still had in flight is deleted by the sidecar's
   * own clean-up when it stops with the driver pod.
   */
  @Override
  public synchronized void stop(String applicationId) {
    SidecarClient client = sidecar;
    if (client == null) {
      return;
    }
    SidecarEvents following = events;
    if (following != null) {
      following.close();
    }
    ExecutorRegistrations reporting = registrations;
    if (reporting != null) {
      reporting.close();
    }
    try {
      client.stopAllocation();
    } catch (RuntimeException e) {
      LOG.warn("execpods: could not stop the allocation at the sidecar: {}", e.toString());
    } finally {
      sidecar = null;
      client.close();
    }
    if (deleteOnTermination) {
      try {
        int deleted = kubernetesClient.pods().inNamespace(namespace)
            .withLabel(Constants$.MODULE$.SPARK_APP_ID_LABEL(), applicationId)
            .withLabel(Constants$.MODULE$.SPARK_ROLE_LABEL(),
                Constants$.MODULE$.SPARK_POD_EXECUTOR_ROLE())
            .delete().size();
        LOG.info("execpods: deleted {} executor pods of {} (by label, as Spark's stop)", deleted,
            applicationId);
      } catch (RuntimeException e) {
        LOG.warn("execpods: could not delete the executor pods of {}: {}", applicationId,
            e.toString());
      }
    }
  }

  private SidecarClient requireStarted() {
    SidecarClient client = sidecar;
    if (client == null) {
      throw new IllegalStateException("execpods: the allocator is not started");
    }
    return client;
  }
}
