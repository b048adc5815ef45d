package io.execpods.spark.testkit;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.SparkEnv;
import org.apache.spark.resource.ResourceInformation;
import org.apache.spark.rpc.RpcEndpoint;
import org.apache.spark.rpc.RpcEndpointRef;
import org.apache.spark.rpc.RpcEnv;
import org.apache.spark.scheduler.cluster.CoarseGrainedClusterMessages;
import scala.PartialFunction;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractPartialFunction;
import scala.runtime.BoxedUnit;

/**
 * Executors that register with a real Spark driver without running: test equipment for a
 * simulated cluster, whose pods have no containers to connect back.
 *
 * <p>A pod of the simulator that turns Running stands for an executor process; the test calls
 * {@link #register} with what that process would read from its pod (the driver URL, the executor
 * id, host, cores and resource profile), and the driver sees the registration Spark's
 * {@code CoarseGrainedExecutorBackend} sends: {@code RegisterExecutor}, then
 * {@code LaunchedExecutor}. The executor's endpoint lives in the driver's own RpcEnv (no second
 * network stack); what the driver sends it (a decommission, a stop) is kept, in order, for the
 * test to act on ({@link #received}), since only the test can end the pod.
 */
public final class SimulatedExecutors {
  private static final Map<String, RpcEndpointRef> REFS = new ConcurrentHashMap<>();
  private static final List<String> RECEIVED = new ArrayList<>();

  private SimulatedExecutors() {}

  /** An executor's endpoint: keeps the name of every message the driver sends it. */
  private static final class Endpoint implements RpcEndpoint {
    private final RpcEnv env;
    private final String executorId;

    Endpoint(RpcEnv env, String executorId) {
      this.env = env;
      this.executorId = executorId;
    }

    @Override
    public RpcEnv rpcEnv() {
      return env;
    }

    private PartialFunction<Object, BoxedUnit> keep() {
      return new AbstractPartialFunction<Object, BoxedUnit>() {
        @Override
        public boolean isDefinedAt(Object message) {
          return true;
        }

        @Override
        public <A1, B1> B1 applyOrElse(A1 message, scala.Function1<A1, B1> fallback) {
          synchronized (RECEIVED) {
            RECEIVED.add(executorId + " " + message.getClass().getSimpleName());
          }
          @SuppressWarnings("unchecked")
          B1 unit = (B1) BoxedUnit.UNIT;
          return unit;
        }
      };
    }

    @Override
    public PartialFunction<Object, BoxedUnit> receive() {
      return keep();
    }

    @Override
    public PartialFunction<Object, BoxedUnit> receiveAndReply(
        org.apache.spark.rpc.RpcCallContext context) {
      context.reply(Boolean.TRUE);
      return keep();
    }
  }

  /**
   * Registers executor {@code executorId} with the driver at {@code driverUrl} (the pod's
   * SPARK_DRIVER_URL). Returns whether the driver accepted it; a refusal (a duplicate id, an
   * executor the allocator deleted) is false.
   */
  public static boolean register(
      String driverUrl, String executorId, String hostname, int cores, int resourceProfileId) {
    RpcEnv env = SparkEnv.get().rpcEnv();
    RpcEndpointRef self =
        env.setupEndpoint("execpods-simulated-executor-" + executorId + "-" + System.nanoTime(),
            new Endpoint(env, executorId));
    RpcEndpointRef driver = env.setupEndpointRefByURI(driverUrl);
    scala.collection.immutable.Map<String, String> none = scala.collection.immutable.Map$.MODULE$.empty();
    scala.collection.immutable.Map<String, ResourceInformation> noResources =
        scala.collection.immutable.Map$.MODULE$.empty();
    boolean accepted;
    try {
      Object answer = driver.askSync(
          new CoarseGrainedClusterMessages.RegisterExecutor(
              executorId, self, hostname, cores, none, none, noResources, resourceProfileId),
          ClassTag$.MODULE$.apply(Boolean.class));
      accepted = Boolean.TRUE.equals(answer);
    } catch (RuntimeException e) {
      accepted = false;
    }
    if (!accepted) {
      env.stop(self);
      return false;
    }
    REFS.put(executorId, self);
    driver.send(new CoarseGrainedClusterMessages.LaunchedExecutor(executorId));
    return true;
  }

  /** Every message the driver sent to a simulated executor since the last call, "id Name". */
  public static String[] received() {
    synchronized (RECEIVED) {
      String[] all = RECEIVED.toArray(new String[0]);
      RECEIVED.clear();
      return all;
    }
  }

  /** Forgets the simulated executors (between applications in one JVM). */
  public static void reset() {
    RpcEnv env = SparkEnv.get() == null ? null : SparkEnv.get().rpcEnv();
    if (env != null) {
      for (RpcEndpointRef ref : REFS.values()) {
        env.stop(ref);
      }
    }
    REFS.clear();
    received();
  }
}
