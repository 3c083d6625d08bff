"""Code protoc generated from querator/proto/querator.proto (``scripts/protoc.sh``): do not edit, regenerate.
Committed so that an installed Querator needs no protoc (docs/adr/0013); tests/unit/wire/test_codec.py
checks that it is current."""
