"""The reading rules (docs/reading-rules.md) that the snapshot loader and the tools share.

The loader applies them when it stores a record (sanitised strings, the bounded history
report and node inventory, identifier patterns); the tools and their reads
(service/store/reads/) apply them when they answer (shortened strings, instants, amounts,
zones, period windows and buckets). Nothing here imports the store or the tools: both
import this. Modules: docs/architecture.md.
"""
