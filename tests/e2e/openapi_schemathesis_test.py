"""schemathesis against the running gateway, driven by its own /openapi.json (as vLLM runs it).

Generated and mutated requests for every documented route go to the real blossom-gateway in
front of the real blossom-server (CPU backend, fixture model), with API keys on. The checks:
no 5xx, every status code, content type, header and JSON body as documented, 405 for methods a
route does not have, and no route that ignores authentication. (Whether every schema-valid
request is accepted is not checked: limits such as the context length depend on the model the
server loaded, which a static document cannot state.)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import urllib.request

from procs import start_gateway, start_server

API_KEY = "schemathesis-key-7d2e"
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_headers_conformance,response_schema_conformance,unsupported_method,ignored_auth")


def schemathesis_cli():
    candidate = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    return candidate if os.access(candidate, os.X_OK) else shutil.which("schemathesis")


class SchemathesisTest(unittest.TestCase):
    def test_generated_requests_get_documented_responses_and_never_a_5xx(self):
        cli = schemathesis_cli()
        if cli is None:
            self.skipTest("schemathesis is not installed in this venv (clients/python/setup_venv.sh)")
        server = start_server("schemathesis-server")
        keys = os.path.join(tempfile.mkdtemp(), "keys.txt")
        with open(keys, "w") as f:
            f.write(API_KEY + "\n")
        gateway = start_gateway("schemathesis-gateway", server, "--api_keys_file", keys)
        try:
            run = subprocess.run(
                [cli, "run", gateway.url + "/openapi.json", "-H", f"Authorization: Bearer {API_KEY}",
                 "--checks", CHECKS, "--max-examples", "25", "--request-timeout", "30",
                 "--generation-deterministic", "--no-color"],
                capture_output=True, text=True, timeout=600)
            output = run.stdout + run.stderr
            self.assertEqual(run.returncode, 0, output[-6000:])
            document = urllib.request.Request(gateway.url + "/openapi.json",
                                              headers={"Authorization": f"Bearer {API_KEY}"})
            with urllib.request.urlopen(document, timeout=10) as r:
                paths = json.load(r)["paths"]
            documented = sum(len(methods) for methods in paths.values())
            # Every operation schemathesis selected was exercised, and it selected all the
            # documented ones but one (it leaves out the document's own route).
            selected = re.search(r"Operations:\s+(\d+) selected / (\d+) total", output)
            self.assertIsNotNone(selected, output[-3000:])
            self.assertEqual(selected.group(1), selected.group(2))
            self.assertGreaterEqual(int(selected.group(1)), documented - 1)
            self.assertIn(f"Tested: {selected.group(1)}", output)
            self.assertEqual(gateway.proc.poll(), None, "the gateway died")
            self.assertEqual(server.proc.poll(), None, "the server died")
        finally:
            gateway.stop()
            server.stop()


if __name__ == "__main__":
    unittest.main()
