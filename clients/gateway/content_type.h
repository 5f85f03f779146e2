// Which request bodies the gateway reads as JSON, by their Content-Type.
//
// Why it matters: a web page can make the user's browser POST to the gateway (on localhost, or
// on an internal address) with `fetch(url, {method: "POST", body})`. Such a request is "simple"
// in CORS terms, so the browser sends it without asking first (no preflight), as long as its
// Content-Type is text/plain, application/x-www-form-urlencoded or multipart/form-data. Refusing
// those (and anything else that is not JSON) before the body is read means a cross-site page
// cannot run generations on a gateway without API keys; a JSON Content-Type from another origin
// needs a preflight, which the gateway never answers with CORS headers.
#ifndef BLOSSOM_CLIENTS_GATEWAY_CONTENT_TYPE_H_
#define BLOSSOM_CLIENTS_GATEWAY_CONTENT_TYPE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace blossom::gateway {

// Whether a request whose Content-Type header is `content_type` (nullptr: no header) may carry
// a JSON body: no header at all (curl without -H, HTTP libraries that do not set one; a browser
// always sets one for a body it sends across sites), application/json, or a structured-syntax
// JSON type (RFC 6839: application/<subtype>+json), case-insensitive, with any parameters
// (charset=utf-8). Anything else, an empty value included, is not.
bool AcceptsAsJson(const std::string* content_type);

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_CONTENT_TYPE_H_
