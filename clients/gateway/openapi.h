// The OpenAPI 3.0 description of the gateway's HTTP routes, served at GET /openapi.json.
#ifndef BLOSSOM_CLIENTS_GATEWAY_OPENAPI_H_
#define BLOSSOM_CLIENTS_GATEWAY_OPENAPI_H_

#include <string>

namespace blossom::gateway {

// The document as JSON text. openapi_test keeps it true: every route the gateway serves is in
// it with its method, and it lists nothing else.
const std::string& OpenApiJson();

}  // namespace blossom::gateway

#endif  // BLOSSOM_CLIENTS_GATEWAY_OPENAPI_H_
