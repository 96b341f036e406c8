"""The product contract as data: elova-tools.json, the tool catalog that `tools/list`
serves byte for byte, read through catalog_file.py."""
