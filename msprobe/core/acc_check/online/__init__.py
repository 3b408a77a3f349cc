"""The online accuracy pre-check (framework-free): the wire format, the TCP (optionally TLS) and shared-directory
transports, the training-side sender and the checker-side server. See docs/acc_check.md "Online pre-check"."""
