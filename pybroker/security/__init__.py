"""Security: who a connection is (its principal) and what that principal may do (ACLs, the authorizer)."""
