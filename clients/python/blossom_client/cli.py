"""`blossom-client`: a small command line over BlossomClient (for smoke tests and debugging)."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from blossom_client import BlossomClient, BlossomError


def _timeout(text: str) -> float:
    """--timeout's value: seconds, 0 = no deadline (as the C++ `blossom --timeout`)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not seconds >= 0:  # also NaN
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds (0 = no deadline), got {text!r}")
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="blossom-client")
    parser.add_argument("--target", default="localhost:8033", help="host:port (blossom-server's default --port is 8033)")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--timeout", type=_timeout, default=0,
                        help="deadline in seconds per call (default 0: none)")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="stream a completion to stdout")
    gen.add_argument("prompt")
    gen.add_argument("--max-new-tokens", type=int)
    gen.add_argument("--temperature", type=float)
    gen.add_argument("--top-k", type=int)
    gen.add_argument("--top-p", type=float)
    gen.add_argument("--seed", type=int)
    gen.add_argument("--stop", action="append", help="stop string (repeatable)")
    tok = sub.add_parser("tokenize")
    tok.add_argument("text")
    sub.add_parser("info", help="print the model info as JSON")
    sub.add_parser("health")
    args = parser.parse_args(argv)

    try:
        with BlossomClient(args.target, api_key=args.api_key, timeout=args.timeout) as client:
            if args.command == "generate":
                params = {k: getattr(args, k) for k in
                          ("max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop")}
                for chunk in client.generate_stream(args.prompt, **params):
                    sys.stdout.write(chunk.text_delta)
                    sys.stdout.flush()
                    if chunk.final is not None:
                        f = chunk.final
                        print()  # end the completion's line on stdout
                        print(f"[{f.finish_reason}; {f.usage.generated_tokens} tokens; "
                              f"ttft {f.timings.time_to_first_token_seconds:.3f} s; "
                              f"{1e3 * f.timings.time_per_output_token_seconds:.1f} ms/token; seed {f.seed}]",
                              file=sys.stderr)
            elif args.command == "tokenize":
                print(json.dumps(asdict(client.tokenize(args.text))))
            elif args.command == "info":
                print(json.dumps(asdict(client.model_info()), indent=2))
            else:
                status = client.health()
                print(status)
                if status != "SERVING":
                    return 1  # usable as a probe, as the C++ CLI's health
    except BlossomError as e:
        print(f"blossom-client: {e}", file=sys.stderr)
        return 1
    except (TypeError, ValueError) as e:  # a parameter the client refused before sending
        print(f"blossom-client: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
