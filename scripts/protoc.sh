#!/usr/bin/env bash
# Regenerates querator/wire/_pb/querator_pb2.py from querator/proto/querator.proto with the protoc that
# grpcio-tools (a development dependency) bundles. Run it after every change to the .proto and commit the
# result: tests/unit/wire/test_codec.py fails while the committed module describes another .proto (docs/adr/0013).
set -euo pipefail
cd "$(dirname "$0")/.."
include=$(python -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')
python -m grpc_tools.protoc -Iquerator/proto -I"$include" --python_out=querator/wire/_pb querator.proto
