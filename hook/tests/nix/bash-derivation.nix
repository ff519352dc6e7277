# `mk name attrs`: a derivation built by the host's bash with `nonce` in it (so Nix never
# reuses an output), for the test files that need several small builds.
{ nonce }:
name: attrs:
derivation (
  {
    inherit name nonce;
    system = builtins.currentSystem;
    builder = "/bin/bash";
    PATH = "/bin:/usr/bin";
  }
  // attrs
)
