"""provisioning."""
