"""What people see: /authorize, sign-in, the consent page, the approvals list (templates/)."""
