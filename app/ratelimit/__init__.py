"""Rate limits: a token bucket and an in-flight count per API key, and a bucket of failed
authentications per client address; in Redis when configured (shared by every gateway process), in
process otherwise. docs/security.md describes the rules and their settings."""
