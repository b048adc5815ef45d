package io.execpods.spark;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.sparkproject.connect.grpc.CallOptions;
import org.sparkproject.connect.grpc.ManagedChannel;
import org.sparkproject.connect.grpc.MethodDescriptor;
import org.sparkproject.connect.grpc.netty.NettyChannelBuilder;
import org.sparkproject.connect.grpc.stub.ClientCalls;
import org.sparkproject.connect.protobuf.CodedInputStream;
import org.sparkproject.connect.protobuf.CodedOutputStream;
import org.sparkproject.connect.protobuf.WireFormat;

/**
 * The execpods sidecar's gRPC contract (proto/execpods/v1/allocator.proto), the calls a Spark
 * allocator needs, over the gRPC that pyspark's spark-connect jar carries (relocated to
 * org.sparkproject.connect.grpc).
 *
 * <p>The messages are encoded by hand with the relocated protobuf runtime's coded streams: no
 * Java code generator is available on these machines (grpcio-tools' protoc has no --java_out),
 * and the few fields used here are stable wire numbers of the contract.
 */
public final class SidecarClient implements AutoCloseable {
  private static final String SERVICE = "execpods.v1.ExecutorAllocator/";
  private static final MethodDescriptor.Marshaller<byte[]> BYTES =
      new MethodDescriptor.Marshaller<byte[]>() {
        @Override
        public InputStream stream(byte[] value) {
          return new java.io.ByteArrayInputStream(value);
        }

        @Override
        public byte[] parse(InputStream stream) {
          try {
            return stream.readAllBytes();
          } catch (IOException e) {
            throw new IllegalStateException("reading a sidecar response", e);
          }
        }
      };

  private final ManagedChannel channel;
  private final long deadlineMillis;

  /** A client for the sidecar at {@code target} (host:port), each call bounded by the deadline. */
  public SidecarClient(String target, long deadlineMillis) {
    this.channel = NettyChannelBuilder.forTarget(target).usePlaintext().build();
    this.deadlineMillis = deadlineMillis;
  }

  private static MethodDescriptor<byte[], byte[]> unary(String name) {
    return MethodDescriptor.<byte[], byte[]>newBuilder()
        .setType(MethodDescriptor.MethodType.UNARY)
        .setFullMethodName(SERVICE + name)
        .setRequestMarshaller(BYTES)
        .setResponseMarshaller(BYTES)
        .build();
  }

  private byte[] call(String name, byte[] request) {
    CallOptions options = CallOptions.DEFAULT.withDeadlineAfter(deadlineMillis, TimeUnit.MILLISECONDS);
    return ClientCalls.blockingUnaryCall(channel, unary(name), options, request);
  }

  /**
   * A resource profile as declared to the sidecar: its id, its executor cores, memory and
   * memory overhead in MiB (0: the sidecar's settings) and its pod template (JSON).
   */
  public static final class Profile {
    final int id;
    final int cores;
    final long memoryMib;
    final long overheadMib;
    final String podTemplate;

    public Profile(int id, int cores, long memoryMib, long overheadMib, String podTemplate) {
      this.id = id;
      this.cores = cores;
      this.memoryMib = memoryMib;
      this.overheadMib = overheadMib;
      this.podTemplate = podTemplate;
    }
  }

  /**
   * RequestTotal: the default profile's total, the other profiles' totals by id, and profiles
   * to declare first. Returns the target now in force for the default profile.
   */
  public int requestTotal(int total, Map<Integer, Integer> profileTotals, Iterable<Profile> profiles) {
    byte[] request = encode(out -> {
      out.writeInt32(1, total);
      for (Map.Entry<Integer, Integer> e : profileTotals.entrySet()) {
        out.writeByteArray(2, encode(entry -> {
          entry.writeInt32(1, e.getKey());
          entry.writeInt32(2, e.getValue());
        }));
      }
      for (Profile p : profiles) {
        out.writeByteArray(3, encode(profile -> {
          profile.writeInt32(1, p.id);
          if (p.cores > 0) {
            profile.writeInt32(2, p.cores);
          }
          if (p.memoryMib > 0) {
            profile.writeInt64(3, p.memoryMib);
          }
          if (p.overheadMib > 0) {
            profile.writeInt64(4, p.overheadMib);
          }
          if (p.podTemplate != null && !p.podTemplate.isEmpty()) {
            profile.writeString(6, p.podTemplate);
          }
        }));
      }
    });
    return (int) readVarintField(call("RequestTotal", request), 1);
  }

  /** IsDeleted: whether the sidecar's allocator deleted this executor while scaling down. */
  public boolean isDeleted(long executorId) {
    byte[] request = encode(out -> out.writeInt64(1, executorId));
    return readVarintField(call("IsDeleted", request), 1) != 0;
  }

  /** KillExecutors: delete these executors' pods (ids as decimal strings). */
  public void killExecutors(Iterable<String> executorIds) {
    call("KillExecutors", encode(out -> {
      for (String id : executorIds) {
        out.writeString(1, id);
      }
    }));
  }

  @Override
  public void close() {
    channel.shutdownNow();
    try {
      channel.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private interface Writer {
    void write(CodedOutputStream out) throws IOException;
  }

  private static byte[] encode(Writer writer) {
    try {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      CodedOutputStream out = CodedOutputStream.newInstance(bytes);
      writer.write(out);
      out.flush();
      return bytes.toByteArray();
    } catch (IOException e) {
      throw new IllegalStateException("encoding a sidecar request", e);
    }
  }

  /** The value of a varint field (0 when absent, as proto3 omits defaults). */
  private static long readVarintField(byte[] message, int field) {
    try {
      CodedInputStream in = CodedInputStream.newInstance(message);
      long value = 0;
      int tag;
      while ((tag = in.readTag()) != 0) {
        if (WireFormat.getTagFieldNumber(tag) == field
            && WireFormat.getTagWireType(tag) == WireFormat.WIRETYPE_VARINT) {
          value = in.readInt64();
        } else {
          in.skipField(tag);
        }
      }
      return value;
    } catch (IOException e) {
      throw new IllegalStateException("decoding a sidecar response", e);
    }
  }
}
