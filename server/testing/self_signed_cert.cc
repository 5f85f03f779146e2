#include "server/testing/self_signed_cert.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <fstream>

namespace blossom::testing {
namespace {

std::string Drain(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string text(data, static_cast<size_t>(size));
  BIO_free(bio);
  return text;
}

}  // namespace

PemPair SelfSignedCert(const std::string& common_name) {
  // Distinct serials: a client that caches by issuer and serial must not mix two of them up.
  static std::atomic<long> serial{1};
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x509 = X509_new();
  X509_set_version(x509, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x509), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x509), -60);
  X509_gmtime_adj(X509_getm_notAfter(x509), 86400);
  X509_set_pubkey(x509, key);
  X509_NAME* name = X509_get_subject_name(x509);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(x509, name);
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, x509, x509, nullptr, nullptr, 0);
  X509_EXTENSION* san =
      X509V3_EXT_conf_nid(nullptr, &v3, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
  X509_add_ext(x509, san, -1);
  X509_EXTENSION_free(san);
  // A CA flag, so that a peer can trust the certificate itself as its root.
  X509_EXTENSION* basic = X509V3_EXT_conf_nid(nullptr, &v3, NID_basic_constraints, "CA:TRUE");
  X509_add_ext(x509, basic, -1);
  X509_EXTENSION_free(basic);
  X509_sign(x509, key, EVP_sha256());
  PemPair pem;
  BIO* cert_bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(cert_bio, x509);
  pem.cert = Drain(cert_bio);
  BIO* key_bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(key_bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  pem.key = Drain(key_bio);
  X509_free(x509);
  EVP_PKEY_free(key);
  return pem;
}

bool WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace blossom::testing
