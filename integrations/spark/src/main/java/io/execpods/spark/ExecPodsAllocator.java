package io.execpods.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import io.fabric8.kubernetes.api.model.Pod;
import io.fabric8.kubernetes.api.model.PodBuilder;
import io.fabric8.kubernetes.client.KubernetesClient;
import io.fabric8.kubernetes.client.utils.Serialization;
import org.apache.spark.SecurityManager;
import org.apache.spark.SparkConf;
import org.apache.spark.deploy.k8s.KubernetesConf$;
import org.apache.spark.deploy.k8s.KubernetesExecutorConf;
import org.apache.spark.deploy.k8s.KubernetesExecutorSpec;
import org.apache.spark.resource.ExecutorResourceRequest;
import org.apache.spark.resource.ResourceProfile;
import org.apache.spark.scheduler.cluster.k8s.AbstractPodsAllocator;
import org.apache.spark.scheduler.cluster.k8s.ExecutorPodsSnapshotsStore;
import org.apache.spark.scheduler.cluster.k8s.KubernetesClusterSchedulerBackend;
import org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBuilder;
import org.apache.spark.util.Clock;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A Spark pods allocator that delegates executor-pod allocation to an execpods sidecar.
 *
 * <p>Set {@code spark.kubernetes.allocation.pods.allocator=io.execpods.spark.ExecPodsAllocator}
 * and {@code spark.execpods.sidecar.address=host:port}. Spark keeps its own watch, poll and
 * lifecycle manager; only the decision of which pods to create and delete moves to the sidecar.
 * Each resource profile's executor pod is built by Spark's own {@link KubernetesExecutorBuilder}
 * (image, environment, volumes, the pod template, resources) and handed to the sidecar as that
 * profile's pod template, with the profile's cores, memory and overhead, so the sidecar sizes
 * the container as Spark would; the sidecar fills in the executor id, name and labels.
 */
public class ExecPodsAllocator extends AbstractPodsAllocator {
  /** Where the sidecar's gRPC server listens (host:port). */
  public static final String ADDRESS = "spark.execpods.sidecar.address";
  /** The deadline of each call to the sidecar, in milliseconds. */
  public static final String DEADLINE = "spark.execpods.sidecar.deadlineMs";

  private static final int DEFAULT_PROFILE_ID = 0;
  private static final String TEMPLATE_EXECUTOR_ID = "0";

  private final SparkConf conf;
  private final SecurityManager securityManager;
  private final KubernetesExecutorBuilder builder;
  private final KubernetesClient client;
  private final Option<Pod> driverPod;
  private final Set<Integer> declared = new HashSet<>();
  private SidecarClient sidecar;
  private String appId;

  public ExecPodsAllocator(
      SparkConf conf,
      SecurityManager securityManager,
      KubernetesExecutorBuilder builder,
      KubernetesClient client,
      ExecutorPodsSnapshotsStore snapshotsStore,
      Clock clock) {
    this.conf = conf;
    this.securityManager = securityManager;
    this.builder = builder;
    this.client = client;
    if (!conf.contains(ADDRESS)) {
      throw new IllegalArgumentException(
          ADDRESS + " must name the execpods sidecar (host:port) when "
              + "spark.kubernetes.allocation.pods.allocator is " + getClass().getName());
    }
    Option<String> driverName = conf.getOption("spark.kubernetes.driver.pod.name");
    if (driverName.isDefined()) {
      String namespace = conf.get("spark.kubernetes.namespace", "default");
      Pod pod = client.pods().inNamespace(namespace).withName(driverName.get()).get();
      if (pod == null) {
        throw new IllegalStateException(
            "no driver pod named " + driverName.get() + " in namespace " + namespace);
      }
      this.driverPod = Option.apply(pod);
    } else {
      this.driverPod = Option.empty();
    }
  }

  @Override
  public Option<Pod> driverPod() {
    return driverPod;
  }

  @Override
  public synchronized void start(String applicationId, KubernetesClusterSchedulerBackend backend) {
    this.appId = applicationId;
    long deadline = conf.getLong(DEADLINE, 30_000L);
    this.sidecar = new SidecarClient(conf.get(ADDRESS), deadline);
  }

  @Override
  public synchronized void setTotalExpectedExecutors(
      scala.collection.immutable.Map<ResourceProfile, Object> totals) {
    if (sidecar == null) {
      throw new IllegalStateException("setTotalExpectedExecutors before start");
    }
    int defaultTotal = 0;
    Map<Integer, Integer> others = new HashMap<>();
    List<SidecarClient.Profile> profiles = new ArrayList<>();
    for (Map.Entry<ResourceProfile, Object> e : CollectionConverters.asJava(totals).entrySet()) {
      ResourceProfile profile = e.getKey();
      int total = ((Number) e.getValue()).intValue();
      int id = profile.id();
      if (declared.add(id)) {
        Map<String, ExecutorResourceRequest> resources = profile.executorResourcesJMap();
        profiles.add(
            new SidecarClient.Profile(
                id,
                (int) amount(resources, ResourceProfile.CORES()),
                amount(resources, ResourceProfile.MEMORY()),
                amount(resources, ResourceProfile.OVERHEAD_MEM()),
                podTemplate(profile)));
      }
      if (id == DEFAULT_PROFILE_ID) {
        defaultTotal = total;
      } else {
        others.put(id, total);
      }
    }
    sidecar.requestTotal(defaultTotal, others, profiles);
  }

  /** A profile's executor resource amount (cores, or MiB of memory); 0 when not set. */
  private static long amount(Map<String, ExecutorResourceRequest> resources, String name) {
    ExecutorResourceRequest request = resources.get(name);
    return request == null ? 0L : request.amount();
  }

  /** The executor pod Spark would create for this profile, as JSON, with a placeholder id. */
  private String podTemplate(ResourceProfile profile) {
    KubernetesExecutorConf executorConf =
        KubernetesConf$.MODULE$.createExecutorConf(
            conf, TEMPLATE_EXECUTOR_ID, appId, driverPod, profile.id());
    KubernetesExecutorSpec spec =
        builder.buildFromFeatures(executorConf, securityManager, client, profile);
    Pod pod =
        new PodBuilder(spec.pod().pod())
            .editOrNewSpec()
            .addToContainers(spec.pod().container())
            .endSpec()
            .build();
    return Serialization.asJson(pod);
  }

  @Override
  public boolean isDeleted(String executorId) {
    SidecarClient client = sidecar;
    if (client == null) {
      return false;
    }
    try {
      return client.isDeleted(Long.parseLong(executorId));
    } catch (NumberFormatException e) {
      return false;
    }
  }

  /**
   * Spark calls this on exit only when spark.kubernetes.executor.deleteOnTermination is true
   * (its default): the sidecar's targets go to 0, so it creates no more pods, and every executor
   * pod of the application is deleted through the sidecar's KillExecutors.
   */
  @Override
  public synchronized void stop(String applicationId) {
    SidecarClient client = sidecar;
    sidecar = null;
    if (client == null) {
      return;
    }
    try {
      client.requestTotal(0, zeroOthers(), List.of());
      List<String> ids = new ArrayList<>();
      String namespace = conf.get("spark.kubernetes.namespace", "default");
      for (Pod pod :
          this.client.pods().inNamespace(namespace)
              .withLabel("spark-app-selector", applicationId)
              .withLabel("spark-role", "executor")
              .list().getItems()) {
        String id = pod.getMetadata().getLabels().get("spark-exec-id");
        if (id != null) {
          ids.add(id);
        }
      }
      if (!ids.isEmpty()) {
        client.killExecutors(ids);
      }
    } finally {
      client.close();
    }
  }

  private Map<Integer, Integer> zeroOthers() {
    Map<Integer, Integer> zero = new HashMap<>();
    for (Integer id : declared) {
      if (id != DEFAULT_PROFILE_ID) {
        zero.put(id, 0);
      }
    }
    return zero;
  }
}
