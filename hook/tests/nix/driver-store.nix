# A fake driver as a store path whose closure holds three paths: driver -> lib-b -> lib-c.
# Built (untagged) by hook/tests/nix_sandbox/, then used as the target of a driver link.
{ nonce }:
let
  c = builtins.toFile "fake-dep-c-${nonce}" "closure member c\n";
  b = builtins.toFile "fake-dep-b-${nonce}" "closure member b, needs ${c}\n";
in
derivation {
  name = "fake-driver-store-${nonce}";
  system = builtins.currentSystem;
  builder = "/bin/bash";
  PATH = "/bin:/usr/bin";
  args = [
    "-c"
    ''
      mkdir -p $out/lib
      echo "FAKE libcuda, depends on ${b}" > $out/lib/libcuda.so.1
    ''
  ];
}
