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
  static final String SERVICE = "execpods.v1.ExecutorAllocator";
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
    Descriptors.ServiceDescriptor service = contract.findServiceByName("ExecutorAllocator");
    Map<String, MethodDescriptor<DynamicMessage, DynamicMessage>> byName = new HashMap<>();
    for (Descriptors.MethodDescriptor method : service.getMethods()) {
      byName.put(
          method.getName(),
          MethodDescriptor.<DynamicMessage, DynamicMessage>newBuilder()
              .setType(
                  method.isServerStreaming()
                      ? MethodDescriptor.MethodType.SERVER_STREAMING
                      : MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(MethodDescriptor.generateFullMethodName(SERVICE, method.getName()))
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
      Descriptors.FileDescriptor allocator = built.get("execpods/v1/allocator.proto");
      return allocator != null ? allocator : last;
    } catch (IOException | Descriptors.DescriptorValidationException e) {
      throw new IllegalStateException("cannot load the execpods contract: " + e, e);
    }
  }

  Descriptor type(String name) {
    return contract.findMessageTypeByName(name);
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
    Descriptor requestType = type("RequestTotalRequest");
    DynamicMessage.Builder request = DynamicMessage.newBuilder(requestType);
    request.setField(requestType.findFieldByName("total"), defaultTotal);
    if (maxFailures >= 0) {
      Descriptor limitType = type("FailureLimit");
      request.setField(requestType.findFieldByName("failure_limit"),
          DynamicMessage.newBuilder(limitType)
              .setField(limitType.findFieldByName("max_failures"), maxFailures)
              .setField(limitType.findFieldByName("validity_interval_ms"), validityMs)
              .build());
    }
    FieldDescriptor totals = requestType.findFieldByName("profile_totals");
    for (Map.Entry<Integer, Integer> entry : others.entrySet()) {
      request.addRepeatedField(totals, mapEntry(totals, entry.getKey(), entry.getValue()));
    }
    Descriptor profileType = type("ResourceProfile");
    FieldDescriptor declared = requestType.findFieldByName("profiles");
    for (Profile profile : profiles) {
      DynamicMessage.Builder message = DynamicMessage.newBuilder(profileType);
      message.setField(profileType.findFieldByName("id"), profile.id);
      message.setField(profileType.findFieldByName("cores"), profile.cores);
      message.setField(profileType.findFieldByName("memory_mib"), profile.memoryMib);
      message.setField(
          profileType.findFieldByName("memory_overhead_mib"), profile.memoryOverheadMib);
      message.setField(profileType.findFieldByName("pod_template"), profile.podTemplate);
      request.addRepeatedField(declared, message.build());
    }
    DynamicMessage response = unary("RequestTotal", request.build());
    Map<Integer, Integer> inForce = new HashMap<>();
    FieldDescriptor field = response.getDescriptorForType().findFieldByName("profile_totals");
    for (int i = 0; i < response.getRepeatedFieldCount(field); i++) {
      DynamicMessage entry = (DynamicMessage) response.getRepeatedField(field, i);
      inForce.put((Integer) entryKey(entry), (Integer) entryValue(entry));
    }
    return inForce;
  }

  /** IsDeleted: whether the sidecar deleted this executor while scaling down. */
  boolean isDeleted(long executorId) {
    Descriptor requestType = type("IsDeletedRequest");
    DynamicMessage request = DynamicMessage.newBuilder(requestType)
        .setField(requestType.findFieldByName("executor_id"), executorId)
        .build();
    DynamicMessage response = unary("IsDeleted", request);
    return (Boolean) response.getField(response.getDescriptorForType().findFieldByName("deleted"));
  }

  /**
   * Follows StreamSnapshots in the background: {@code observer} gets each message (notices,
   * the application's failure). Snapshots come at most every {@code batchIntervalMs}. Returns
   * the call, to cancel it.
   */
  ClientCall<DynamicMessage, DynamicMessage> follow(
      long batchIntervalMs, StreamObserver<DynamicMessage> observer) {
    Descriptor requestType = type("StreamSnapshotsRequest");
    DynamicMessage request = DynamicMessage.newBuilder(requestType)
        .setField(requestType.findFieldByName("batch_interval_ms"), batchIntervalMs)
        .build();
    ClientCall<DynamicMessage, DynamicMessage> call = channel.newCall(
        methods.get("StreamSnapshots"), CallOptions.DEFAULT.withWaitForReady());
    ClientCalls.asyncServerStreamingCall(call, request, observer);
    return call;
  }

  SidecarSecurity security() {
    return security;
  }

  private static DynamicMessage mapEntry(FieldDescriptor mapField, Object key, Object value) {
    Descriptor entryType = mapField.getMessageType();
    return DynamicMessage.newBuilder(entryType)
        .setField(entryType.findFieldByName("key"), key)
        .setField(entryType.findFieldByName("value"), value)
        .build();
  }

  private static Object entryKey(DynamicMessage entry) {
    return entry.getField(entry.getDescriptorForType().findFieldByName("key"));
  }

  private static Object entryValue(DynamicMessage entry) {
    return entry.getField(entry.getDescriptorForType().findFieldByName("value"));
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
