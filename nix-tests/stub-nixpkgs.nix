# A STUB of the flake input `nixpkgs`, for what this machine cannot have (Nixpkgs itself):
# the REAL Nixpkgs `lib`, and a package set whose every package is a REAL derivation built by
# the host's /bin/sh (so a sandboxed build needs `sandbox-paths = /bin /usr /lib /lib64`).
# Written for these tests from what the flake uses; no Nixpkgs code in it.
#
# - the package (`rustPlatform.buildRustPackage`) copies a prebuilt `cuda-sandbox-hook` (and
#   `cuda-sandbox-check`, when there) from `hookBin` (nix-tests/flake-check and
#   nix-tests/gpu-check-builds put `cargo build`'s binaries there); without `hookBin` it is a
#   derivation that fails if built;
# - `runCommand`, `writeText`, `linkFarm` work for real; `testers.runNixOSTest`, `mkShell` and
#   the tools of the dev shell are derivations that fail if built (`nix flake check --no-build`
#   only instantiates them);
# - `lib.nixosSystem` evaluates the modules with ./stubs.nix's NixOS stand-ins (nix.conf,
#   /etc, assertions, hardware.nvidia, …) plus the few options a system configuration sets;
#   it records its arguments (`args`) and refuses the legacy `system` argument, so that the
#   flake's use of it is checked.
#
# Every stub derivation also carries what it was made from (`args`, `env`, `script`,
# `entries`, `text`) so that nix-tests/flake-eval.nix can check the flake's wiring.
{
  lib,
  system ? "x86_64-linux",
  hookBin ? null,
  # Any string; a new one gives the package (and all that uses it) a new derivation, so that a
  # test's builds run again instead of finding their outputs in the store.
  nonce ? "",
  # Extra attributes for the package set (e.g. a `cudaPackages` with cuda_compat available).
  extraPackages ? { },
}:
let
  hostPlatform = {
    inherit system;
    isLinux = true;
  };

  # A real derivation: `script` run by the host's /bin/sh with `set -eu`; `nativeBuildInputs`'
  # bin/ directories come first in PATH.
  shDerivation =
    name: env: script:
    let
      nativeBuildInputs = env.nativeBuildInputs or [ ];
      drv = derivation (
        removeAttrs env [
          "nativeBuildInputs"
          "passthru"
          "meta"
        ]
        // {
          inherit name system;
          builder = "/bin/sh";
          args = [
            "-euc"
            script
          ];
          PATH = lib.concatStringsSep ":" (map (p: "${p}/bin") nativeBuildInputs ++ [ "/usr/bin:/bin" ]);
        }
      );
    in
    drv
    // (env.passthru or { })
    // {
      inherit env script;
      meta = env.meta or { };
    };

  # A derivation that cannot be built here, and says so.
  unbuildable =
    name: attrs:
    shDerivation name { } ''
      echo "${name}: a stub of Nixpkgs (nix-tests/stub-nixpkgs.nix) cannot build this" >&2
      exit 1
    ''
    // attrs;

  writeText =
    name: text:
    shDerivation name { inherit text; } ''printf '%s' "$text" > "$out"'' // { inherit text; };

  stubs = import ./stubs.nix { inherit lib writeText; };

  # As Nixpkgs' make-derivation.nix: attributes or a function of the final attributes
  # (with `finalPackage`); passthru merged into the result, which also keeps it as
  # `.passthru` (what the NixOS-CUDA Hydra's jobset reads).
  mkDerivation =
    fnOrAttrs:
    let
      attrs = if builtins.isFunction fnOrAttrs then fnOrAttrs final else fnOrAttrs;
      final = attrs // {
        finalPackage = result;
      };
      name = attrs.name or "${attrs.pname}-${attrs.version}";
      passthru = attrs.passthru or { };
      drv = shDerivation name (removeAttrs attrs [
        "passthru"
        "meta"
      ]) (attrs.buildCommand or "mkdir -p $out");
      result =
        drv
        // passthru
        // {
          inherit passthru;
          meta = attrs.meta or { };
        };
    in
    result;

  # The module's stand-ins, less `cuda-sandbox`: Nixpkgs has no such package (the flake's
  # overlay adds it).
  pkgs =
    removeAttrs stubs.pkgs [ "cuda-sandbox" ]
    // {
      inherit lib writeText pkgs;
      stdenv = {
        inherit hostPlatform;
        buildPlatform = hostPlatform;
        inherit mkDerivation;
      };
      callPackage =
        fn: args:
        let
          f = if builtins.isFunction fn then fn else import fn;
        in
        f (builtins.intersectAttrs (builtins.functionArgs f) pkgs // args);

      rustPlatform.buildRustPackage =
        args:
        let
          name = "${args.pname}-${args.version}";
          drv =
            if hookBin == null then
              unbuildable name { }
            else
              shDerivation name
                {
                  outputs = args.outputs or [ "out" ];
                  inherit hookBin nonce;
                }
                ''
                  mkdir -p "$out/bin"
                  cp "$hookBin/cuda-sandbox-hook" "$out/bin/"
                  if [ -e "$hookBin/cuda-sandbox-check" ]; then cp "$hookBin/cuda-sandbox-check" "$out/bin/"; fi
                  if [ -n "''${fixtures:-}" ]; then mkdir -p "$fixtures"; fi
                '';
        in
        drv
        // (args.passthru or { })
        // {
          inherit args;
          meta = args.meta or { };
        };
      autoAddDriverRunpath = unbuildable "auto-add-driver-runpath-hook" { };

      runCommand =
        name: env: script:
        shDerivation name env script;

      linkFarm = name: entries: unbuildable name { inherit entries; };
      mkShell = args: unbuildable "shell" { inherit args; };
      testers.runNixOSTest = args: unbuildable "vm-test-run-${args.name}" { inherit args; };
      clippy = unbuildable "clippy" { };
      rustfmt = unbuildable "rustfmt" { };
      rust-analyzer = unbuildable "rust-analyzer" { };
      nixfmt = unbuildable "nixfmt" { };
    }
    // extraPackages;

  # What a system configuration sets besides the module's options (loosely typed).
  systemOptions = {
    options = {
      nixpkgs.hostPlatform = lib.mkOption {
        type = lib.types.either lib.types.str (lib.types.attrsOf lib.types.anything);
      };
      boot.loader.grub.enable = lib.mkOption {
        type = lib.types.bool;
        default = true;
      };
      fileSystems = lib.mkOption {
        type = lib.types.attrsOf (lib.types.attrsOf lib.types.anything);
        default = { };
      };
      system.stateVersion = lib.mkOption { type = lib.types.str; };
      nixpkgs.config = lib.mkOption {
        type = lib.types.attrsOf lib.types.anything;
        default = { };
      };
    };
  };
in
{
  lib = lib // {
    nixosSystem =
      args@{
        modules,
        specialArgs ? { },
        ...
      }:
      # The legacy argument: NixOS takes the platform from nixpkgs.hostPlatform now.
      assert lib.assertMsg (
        !(args ? system)
      ) "nixosSystem (stub): the legacy `system` argument; set nixpkgs.hostPlatform in a module";
      lib.evalModules {
        modules = [
          stubs.module
          systemOptions
        ]
        ++ modules;
        specialArgs = {
          inherit pkgs;
        }
        // specialArgs;
      }
      // {
        inherit args;
      };
  };
  legacyPackages.${system} = pkgs;
  outPath = builtins.storeDir + "/00000000000000000000000000000000-nixpkgs-stub";
}
