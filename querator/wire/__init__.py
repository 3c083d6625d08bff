"""The v1 wire format: message types and their JSON and protobuf encodings."""
