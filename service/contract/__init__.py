"""The product contract as data: elova-tools.json, the tool catalog that `tools/list`
serves byte for byte (service/mcp/catalog.py) and that argument errors read
(service/tools/arguments.py)."""
