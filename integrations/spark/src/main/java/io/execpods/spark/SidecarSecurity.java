package io.execpods.spark;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.GeneralSecurityException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkConf;
import org.sparkproject.connect.grpc.CallOptions;
import org.sparkproject.connect.grpc.Channel;
import org.sparkproject.connect.grpc.ChannelCredentials;
import org.sparkproject.connect.grpc.ClientCall;
import org.sparkproject.connect.grpc.ClientInterceptor;
import org.sparkproject.connect.grpc.ForwardingClientCall;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.MethodDescriptor;
import org.sparkproject.connect.grpc.TlsChannelCredentials;
import org.sparkproject.connect.grpc.util.AdvancedTlsX509KeyManager;

/**
 * How the plugin reaches a sidecar that serves TLS, mutual TLS or wants a bearer token: the
 * {@code spark.execpods.sidecar.tls.*} and {@code spark.execpods.sidecar.auth.*} properties.
 *
 * <p>The certificate files are read again every {@code spark.execpods.sidecar.tls.reloadSeconds}
 * (60 by default; cert-manager
 * rotates a Secret's files in place), and the token file whenever it changed, so a long-running
 * driver keeps working across rotations. The token never appears in a message or log line.
 */
final class SidecarSecurity implements AutoCloseable {
  static final String TLS_ENABLED = "spark.execpods.sidecar.tls.enabled";
  static final String TLS_CA_FILE = "spark.execpods.sidecar.tls.caFile";
  static final String TLS_CERT_FILE = "spark.execpods.sidecar.tls.certFile";
  static final String TLS_KEY_FILE = "spark.execpods.sidecar.tls.keyFile";
  static final String TLS_AUTHORITY = "spark.execpods.sidecar.tls.authority";
  static final String TOKEN_FILE = "spark.execpods.sidecar.auth.tokenFile";
  static final String TOKEN_ENV = "spark.execpods.sidecar.auth.tokenEnv";
  static final String TLS_RELOAD = "spark.execpods.sidecar.tls.reloadSeconds";
  static final long DEFAULT_RELOAD_SECONDS = 60;

  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  final boolean tls;
  final String caFile;
  final String certFile;
  final String keyFile;
  final String authority;
  private final long reloadSeconds;
  private final String tokenFile;
  private final String tokenEnv;
  private final List<AutoCloseable> reloaders = new ArrayList<>();
  private ScheduledExecutorService reloads;
  private volatile String token;
  private volatile long tokenStamp = Long.MIN_VALUE;

  SidecarSecurity(SparkConf conf) {
    this.caFile = blankToNull(conf.get(TLS_CA_FILE, ""));
    this.certFile = blankToNull(conf.get(TLS_CERT_FILE, ""));
    this.keyFile = blankToNull(conf.get(TLS_KEY_FILE, ""));
    this.authority = blankToNull(conf.get(TLS_AUTHORITY, ""));
    this.tls = conf.getBoolean(TLS_ENABLED, caFile != null || certFile != null);
    this.reloadSeconds = conf.getLong(TLS_RELOAD, DEFAULT_RELOAD_SECONDS);
    if (reloadSeconds < 1) {
      throw new IllegalArgumentException("execpods: " + TLS_RELOAD + "=" + reloadSeconds
          + " is invalid: it must be at least 1");
    }
    this.tokenFile = blankToNull(conf.get(TOKEN_FILE, ""));
    this.tokenEnv = blankToNull(conf.get(TOKEN_ENV, ""));
    if ((certFile == null) != (keyFile == null)) {
      throw new IllegalArgumentException("execpods: " + TLS_CERT_FILE + " and " + TLS_KEY_FILE
          + " go together (the client certificate and key for mutual TLS): set both or neither");
    }
    if (certFile != null && !tls) {
      throw new IllegalArgumentException(
          "execpods: " + TLS_CERT_FILE + " needs TLS: do not set " + TLS_ENABLED + "=false");
    }
    if (tokenFile != null && tokenEnv != null) {
      throw new IllegalArgumentException(
          "execpods: set one of " + TOKEN_FILE + " and " + TOKEN_ENV + ", not both");
    }
    checkReadable(TLS_CA_FILE, caFile);
    checkReadable(TLS_CERT_FILE, certFile);
    checkReadable(TLS_KEY_FILE, keyFile);
    checkReadable(TOKEN_FILE, tokenFile);
    if (tokenEnv != null && blankToNull(System.getenv(tokenEnv)) == null) {
      throw new IllegalArgumentException("execpods: " + TOKEN_ENV + " names the environment "
          + "variable " + tokenEnv + ", which is not set in the driver");
    }
    this.token = readToken();
  }

  boolean hasToken() {
    return tokenFile != null || tokenEnv != null;
  }

  /** Where the token comes from, for messages: the property that sets it. */
  String tokenSource() {
    return tokenFile != null ? TOKEN_FILE + "=" + tokenFile : TOKEN_ENV + "=" + tokenEnv;
  }

  /** The channel's TLS credentials (reloading their files), or null for plaintext. */
  ChannelCredentials credentials() {
    if (!tls) {
      return null;
    }
    reloads = Executors.newSingleThreadScheduledExecutor(runnable -> {
      Thread thread = new Thread(runnable, "execpods-tls-reload");
      thread.setDaemon(true);
      return thread;
    });
    try {
      TlsChannelCredentials.Builder builder = TlsChannelCredentials.newBuilder();
      if (caFile != null) {
        builder.trustManager(new ReloadingTrustManager(new File(caFile), reloadSeconds * 1000L));
      }
      if (certFile != null) {
        AdvancedTlsX509KeyManager keys = new AdvancedTlsX509KeyManager();
        reloaders.add(keys.updateIdentityCredentials(
            new File(certFile), new File(keyFile), reloadSeconds, TimeUnit.SECONDS, reloads));
        builder.keyManager(keys);
      }
      return builder.build();
    } catch (IOException | GeneralSecurityException e) {
      close();
      throw new IllegalArgumentException("execpods: cannot load the TLS files ("
          + TLS_CA_FILE + ", " + TLS_CERT_FILE + ", " + TLS_KEY_FILE + "; the key must be a "
          + "PKCS#8 PEM, 'BEGIN PRIVATE KEY', e.g. cert-manager's privateKey.encoding: PKCS8): "
          + e, e);
    }
  }

  /** Adds {@code authorization: Bearer <token>} to every call when a token is configured. */
  ClientInterceptor bearer() {
    return new ClientInterceptor() {
      @Override
      public <Q, R> ClientCall<Q, R> interceptCall(
          MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        return new ForwardingClientCall.SimpleForwardingClientCall<Q, R>(
            next.newCall(method, options)) {
          @Override
          public void start(ClientCall.Listener<R> listener, Metadata headers) {
            String current = currentToken();
            if (current != null) {
              headers.put(AUTHORIZATION, "Bearer " + current);
            }
            super.start(listener, headers);
          }
        };
      }
    };
  }

  private String currentToken() {
    if (tokenFile != null) {
      long stamp = new File(tokenFile).lastModified();
      if (stamp != tokenStamp) {
        try {
          token = readToken();
          tokenStamp = stamp;
        } catch (IllegalArgumentException e) {
          return token; // caught mid-rotation: keep the last one, read again next call
        }
      }
    }
    return token;
  }

  private String readToken() {
    if (tokenEnv != null) {
      return System.getenv(tokenEnv).trim();
    }
    if (tokenFile == null) {
      return null;
    }
    try {
      String text = new String(Files.readAllBytes(new File(tokenFile).toPath()),
          StandardCharsets.UTF_8).trim();
      if (text.isEmpty()) {
        throw new IllegalArgumentException("execpods: " + TOKEN_FILE + "=" + tokenFile
            + " is empty");
      }
      return text;
    } catch (IOException e) {
      throw new IllegalArgumentException(
          "execpods: " + TOKEN_FILE + "=" + tokenFile + " cannot be read: " + e, e);
    }
  }

  private static void checkReadable(String key, String path) {
    if (path != null && !new File(path).canRead()) {
      throw new IllegalArgumentException(
          "execpods: " + key + "=" + path + " is not a readable file");
    }
  }

  private static String blankToNull(String value) {
    return value == null || value.trim().isEmpty() ? null : value.trim();
  }

  @Override
  public void close() {
    for (AutoCloseable reloader : reloaders) {
      try {
        reloader.close();
      } catch (Exception e) {
        // nothing left to release
      }
    }
    reloaders.clear();
    if (reloads != null) {
      reloads.shutdownNow();
    }
  }
}
