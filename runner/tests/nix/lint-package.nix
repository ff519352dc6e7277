# A package for the lint's closure walk, built (untagged) by runner/tests/driver_choice_e2e/:
# its own files (`package`: ELF files made by the test) plus a reference to a FAKE toolkit store
# path (`toolkit`: holding a static CUDA archive), so the archive is in its runtime closure but
# not in the package itself.
{ package, toolkit }:
derivation {
  name = "fake-cuda-app";
  system = builtins.currentSystem;
  builder = "/bin/sh";
  PATH = "/bin:/usr/bin";
  src = builtins.path {
    path = /. + package;
    name = "fake-cuda-app-files";
  };
  toolkit = builtins.path {
    path = /. + toolkit;
    name = "fake-cuda-toolkit-static";
  };
  args = [
    "-c"
    ''
      mkdir -p $out
      cp -R $src/. $out/
      echo "$toolkit" > $out/built-with
    ''
  ];
}
