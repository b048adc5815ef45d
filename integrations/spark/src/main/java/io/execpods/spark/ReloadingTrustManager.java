package io.execpods.spark;

import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.Collection;

import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManager;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedTrustManager;

/**
 * Trusts the CA certificates of a PEM file, read again when the file changes (checked at most
 * every {@code periodMs}), so a rotated CA (cert-manager rewrites the Secret's files in place) is
 * trusted from the next connection on. Verification, the sidecar's name included, is the JDK's
 * own trust manager over those certificates. A file caught half-written keeps the last good set.
 */
final class ReloadingTrustManager extends X509ExtendedTrustManager {
  private final File file;
  private final long periodMs;
  private volatile X509ExtendedTrustManager delegate;
  private volatile long stamp;
  private volatile long checkedAt;

  ReloadingTrustManager(File file, long periodMs) throws IOException, GeneralSecurityException {
    this.file = file;
    this.periodMs = periodMs;
    this.stamp = file.lastModified();
    this.delegate = load(file);
    this.checkedAt = System.currentTimeMillis();
  }

  private static X509ExtendedTrustManager load(File file)
      throws IOException, GeneralSecurityException {
    KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
    store.load(null, null);
    try (InputStream in = new FileInputStream(file)) {
      Collection<? extends Certificate> certificates =
          CertificateFactory.getInstance("X.509").generateCertificates(in);
      if (certificates.isEmpty()) {
        throw new CertificateException(file + " holds no certificate");
      }
      int index = 0;
      for (Certificate certificate : certificates) {
        store.setCertificateEntry("ca-" + index++, certificate);
      }
    }
    TrustManagerFactory factory =
        TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
    factory.init(store);
    for (TrustManager manager : factory.getTrustManagers()) {
      if (manager instanceof X509ExtendedTrustManager) {
        return (X509ExtendedTrustManager) manager;
      }
    }
    throw new GeneralSecurityException("no X509 trust manager for " + file);
  }

  private X509ExtendedTrustManager current() {
    long now = System.currentTimeMillis();
    if (now - checkedAt >= periodMs) {
      checkedAt = now;
      long modified = file.lastModified();
      if (modified != stamp) {
        try {
          delegate = load(file);
          stamp = modified;
        } catch (IOException | GeneralSecurityException e) {
          // keep the last good certificates; the next check reads the file again
        }
      }
    }
    return delegate;
  }

  @Override
  public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine engine)
      throws CertificateException {
    current().checkServerTrusted(chain, authType, engine);
  }

  @Override
  public void checkServerTrusted(X509Certificate[] chain, String authType, Socket socket)
      throws CertificateException {
    current().checkServerTrusted(chain, authType, socket);
  }

  @Override
  public void checkServerTrusted(X509Certificate[] chain, String authType)
      throws CertificateException {
    current().checkServerTrusted(chain, authType);
  }

  @Override
  public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine engine)
      throws CertificateException {
    current().checkClientTrusted(chain, authType, engine);
  }

  @Override
  public void checkClientTrusted(X509Certificate[] chain, String authType, Socket socket)
      throws CertificateException {
    current().checkClientTrusted(chain, authType, socket);
  }

  @Override
  public void checkClientTrusted(X509Certificate[] chain, String authType)
      throws CertificateException {
    current().checkClientTrusted(chain, authType);
  }

  @Override
  public X509Certificate[] getAcceptedIssuers() {
    return current().getAcceptedIssuers();
  }
}
