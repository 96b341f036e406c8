"""The tools' read statements, one module a record family: the tools call them."""
