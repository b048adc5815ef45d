package io.execpods.spark;

import javax.net.ssl.SSLException;

import org.sparkproject.connect.grpc.Status;
import org.sparkproject.connect.grpc.StatusRuntimeException;

/**
 * A failed call to the sidecar as a message a Spark user can act on: unreachable, a TLS
 * handshake that failed, a token refused, a certificate not allowed, or the wrong application
 * id, each naming the property to fix.
 */
final class SidecarErrors {
  private SidecarErrors() {}

  static IllegalStateException explain(
      RuntimeException error, String address, SidecarSecurity security) {
    String at = "execpods: the sidecar at " + address + " (" + ExecPodsAllocator.SIDECAR_ADDRESS
        + ")";
    if (!(error instanceof StatusRuntimeException)) {
      return new IllegalStateException(at + " could not be called: " + error, error);
    }
    Status status = ((StatusRuntimeException) error).getStatus();
    String said = status.getDescription() == null ? status.getCode().name()
        : status.getCode().name() + ": " + status.getDescription();
    String message;
    switch (status.getCode()) {
      case UNAUTHENTICATED:
        message = at + " refused the call as unauthenticated (" + said + "). "
            + (security.hasToken()
                ? "The token from " + security.tokenSource() + " is not the sidecar's: "
                : "No token is set: ")
            + "set " + SidecarSecurity.TOKEN_FILE + " (or " + SidecarSecurity.TOKEN_ENV
            + ") to the sidecar's token (its execpods.sidecar.auth.tokenFile)";
        break;
      case PERMISSION_DENIED:
        message = at + " refused this driver's client certificate (" + said + "): use a "
            + "certificate the sidecar allows (" + SidecarSecurity.TLS_CERT_FILE + ", "
            + SidecarSecurity.TLS_KEY_FILE + "; the sidecar's execpods.sidecar.tls.allowedClients)";
        break;
      case INVALID_ARGUMENT:
        message = status.getDescription() != null
            && status.getDescription().contains("labelled for application")
            ? at + " serves another application (" + said + "); or set spark.app.id to the "
                + "sidecar's application id"
            : at + " refused the request (" + said + ")";
        break;
      case DEADLINE_EXCEEDED:
        // Calls wait for the sidecar (waitForReady): a handshake that keeps failing ends here.
        message = sslCause(error) != null || said.contains("SSL") || said.contains("certif")
                || !security.tls && said.contains("Network closed")
            ? unavailable(at, said, error, security)
            : at + " did not answer within " + ExecPodsAllocator.SIDECAR_DEADLINE
                + " (" + said + "): is it running and listening there?";
        break;
      case UNAVAILABLE:
        message = unavailable(at, said, error, security);
        break;
      default:
        message = at + " failed the call (" + said + ")";
    }
    return new IllegalStateException(message, error);
  }

  private static String unavailable(
      String at, String said, Throwable error, SidecarSecurity security) {
    Throwable tlsCause = sslCause(error);
    if (security.tls && (tlsCause != null || said.contains("SSL") || said.contains("certif"))) {
      String why = tlsCause != null ? tlsCause.getMessage() : said;
      return at + ": the TLS handshake failed (" + why + "): check "
          + SidecarSecurity.TLS_CA_FILE + " (the CA that signed the sidecar's certificate), "
          + SidecarSecurity.TLS_AUTHORITY + " (the name in it) and, for mutual TLS, "
          + SidecarSecurity.TLS_CERT_FILE + "/" + SidecarSecurity.TLS_KEY_FILE;
    }
    if (tlsCause != null || !security.tls && said.contains("Network closed")) {
      return at + " is not reachable over plaintext (" + said + "): if the sidecar serves "
          + "TLS, set " + SidecarSecurity.TLS_ENABLED + "=true and " + SidecarSecurity.TLS_CA_FILE;
    }
    return at + " is not reachable (" + said + ")";
  }

  private static Throwable sslCause(Throwable error) {
    for (Throwable cause = error; cause != null; cause = cause.getCause()) {
      if (cause instanceof SSLException
          || cause.getClass().getName().contains("NotSslRecordException")) {
        return cause;
      }
    }
    return null;
  }
}
