"""The client registry: registered clients, Client ID Metadata Documents, lookup, retention."""
