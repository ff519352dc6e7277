# cuda-sandbox, the package: `cuda-sandbox-hook` and `cuda-sandbox-check`, built by
# `callPackage` with whatever package set it is given. The flake's packages and overlay, the
# NixOS module's default `programs.cuda-sandbox.package` and `lib.mkGpuCheck` all build it from
# this file, so with or without flakes it is one derivation per package set:
#
#   pkgs.callPackage ./cuda-sandbox/package.nix { }
{
  lib,
  rustPlatform,
  autoAddDriverRunpath,
  runCommand,
  writeText,
  testers,
  cudaPackages ? { },
}:
let
  cargoToml = lib.importTOML ./Cargo.toml;

  # Nixpkgs' CUDA binaries load `${cuda_compat}/compat` before the driver link exactly when
  # cuda_compat is available (autoAddCudaCompatRunpath); the runner must load what they would,
  # or its driver check would contradict them.
  compatAvailable =
    let
      tried = builtins.tryEval (cudaPackages.cuda_compat.meta.available or false);
    in
    tried.success && tried.value;

  package = rustPlatform.buildRustPackage {
    pname = "cuda-sandbox";
    inherit (cargoToml.workspace.package) version;

    # Only what cargo reads, so that editing the Nix files or the docs rebuilds nothing.
    # (cleanSourceWith rather than lib.fileset: it also evaluates on Nix 2.8, where nix-tests/
    # checks that every workspace member is here.)
    src = lib.cleanSourceWith {
      name = "cuda-sandbox-source";
      src = ./.;
      filter =
        path: _type:
        let
          relative = lib.removePrefix "${toString ./.}/" (toString path);
        in
        # hook/fuzz is outside the workspace (cargo-fuzz, its corpus and artifacts).
        relative != "hook/fuzz"
        && baseNameOf relative != "target"
        && lib.any (top: relative == top || lib.hasPrefix "${top}/" relative) [
          "Cargo.toml"
          "Cargo.lock"
          "hook"
          "elfkit"
          "cuda-facts"
          "runner"
          "manifest"
          "testkit"
          "fixtures"
        ];
    };
    cargoLock.lockFile = ./Cargo.lock;

    # The whole workspace is built: the runner's tests load the fake driver libraries. Tests
    # that need root or a Nix daemon skip themselves inside the build sandbox.

    # libcuda.so.1 is found like in every Nixpkgs CUDA binary: through DT_RUNPATH
    # /run/opengl-driver/lib, which the hook exposes in the sandbox. When cuda_compat is
    # available, `${cuda_compat}/compat` goes before the link, as in every Nixpkgs CUDA
    # redistributable (the hook exposes it when it picks compat).
    nativeBuildInputs = [
      autoAddDriverRunpath
    ]
    ++ lib.optional compatAvailable cudaPackages.autoAddCudaCompatRunpath;

    # The fake driver (make-fake-driver and libfake_*.so) is for tests: never in `out`, where a
    # library directory might be taken for a driver.
    outputs = [
      "out"
      "fixtures"
    ];
    postInstall = ''
      mkdir -p $fixtures/bin $fixtures/lib
      mv $out/bin/make-fake-driver $fixtures/bin/
      mv $out/lib/libfake_*.so $fixtures/lib/
      rmdir --ignore-fail-on-non-empty $out/lib
    '';

    # The NixOS VM test of the module with this very package.
    passthru.tests.vm = import ./nix-tests/vm.nix {
      inherit
        runCommand
        writeText
        testers
        package
        ;
      module = ./nixos-module;
    };

    meta = {
      description = "Nix pre-build-hook exposing NVIDIA GPUs and the CUDA driver to tagged builds, and the in-sandbox checks";
      homepage = cargoToml.workspace.package.repository;
      license = lib.licenses.mit;
      platforms = lib.platforms.linux;
      # The package's meta only: NixOS's meta.maintainers accepts entries of
      # lib.maintainers alone, and the project is not in Nixpkgs' list.
      maintainers = [ (import ./nixos-module/maintainers.nix).cuda-sandbox ];
      mainProgram = "cuda-sandbox-hook";
    };
  };
in
package
