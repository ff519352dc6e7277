{
  description = "cuda-sandbox: NVIDIA GPUs and the right CUDA driver inside the Nix build sandbox, for derivations that ask";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;

      # Where NVIDIA ships CUDA drivers and Nixpkgs builds CUDA.
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});

      cargoToml = lib.importTOML ./Cargo.toml;

      # The package, as a callPackage function so that the overlay, the flake's packages and
      # mkGpuCheck all build it with the package set they are given.
      cudaSandbox =
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
          # Nixpkgs' CUDA binaries load `${cuda_compat}/compat` before the driver link exactly
          # when cuda_compat is available (autoAddCudaCompatRunpath); the runner must load what
          # they would, or its driver check would contradict them.
          compatAvailable =
            let
              tried = builtins.tryEval (cudaPackages.cuda_compat.meta.available or false);
            in
            tried.success && tried.value;

          package = rustPlatform.buildRustPackage {
          pname = "cuda-sandbox";
          inherit (cargoToml.workspace.package) version;

          # Only what cargo reads, so that editing the Nix files or the docs rebuilds nothing.
          # (cleanSourceWith rather than lib.fileset: it also evaluates on Nix 2.8, where
          # nix-tests/ checks that every workspace member is here.)
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
                "runner"
                "manifest"
                "testkit"
                "fixtures"
              ];
          };
          cargoLock.lockFile = ./Cargo.lock;

          # The whole workspace is built: the runner's tests load the fake driver libraries.
          # Tests that need root or a Nix daemon skip themselves inside the build sandbox.

          # libcuda.so.1 is found like in every nixpkgs CUDA binary: through DT_RUNPATH
          # /run/opengl-driver/lib, which the hook exposes in the sandbox.
          # After it, when cuda_compat is available, `${cuda_compat}/compat` goes before the link,
          # as in every Nixpkgs CUDA redistributable (the hook exposes it when it picks compat).
          nativeBuildInputs = [
            autoAddDriverRunpath
          ]
          ++ lib.optional compatAvailable cudaPackages.autoAddCudaCompatRunpath;

          # The fake driver (make-fake-driver and libfake_*.so) is for tests: never in `out`,
          # where a library directory might be taken for a driver.
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
            maintainers = [ (import ./nixos-module/maintainers.nix).cuda-sandbox ];
            mainProgram = "cuda-sandbox-hook";
          };
        };
        in
        package;

      # A derivation that runs, in the sandbox of a GPU builder, the runner's checks, the ELF
      # lint of `package`, then `command` (the package's own GPU test).
      mkGpuCheckWith =
        { pkgs, runner }:
        {
          package,
          name ? "${lib.getName package}-gpu-check",
          features ? [ "cuda" ],
          # `host`, `compat` or a path prefix for the loaded libcuda.so.1; null: the hook's choice.
          expectDriver ? null,
          # Shell commands run last, with $out existing (e.g. "${package}/bin/my-gpu-test").
          command ? null,
          lint ? true,
        }:
        pkgs.runCommand name
          {
            requiredSystemFeatures = features;
            nativeBuildInputs = [ runner ];
            # The package's runtime closure, for the package::* checks: inside the sandbox
            # there is no store database to ask.
            exportReferencesGraph = [
              "package-closure"
              package
            ];
            passthru = { inherit package; };
          }
          ''
            mkdir -p $out
            cuda-sandbox-check ${
              lib.optionalString (expectDriver != null) "--expect-driver ${lib.escapeShellArg expectDriver}"
            } --package ${package} --package-closure package-closure --report $out/report.json
            ${lib.optionalString lint "cuda-sandbox-check lint ${package}"}
            ${lib.optionalString (command != null) command}
          '';

      # The GPU checks of tests-gpu/ with the nixpkgs-built runner, which needs no
      # LD_LIBRARY_PATH: its DT_RUNPATH has the driver link.
      gpuTests =
        pkgs: args:
        import ./tests-gpu (
          {
            runner = self.packages.${pkgs.stdenv.hostPlatform.system}.default;
            inherit (pkgs.stdenv.hostPlatform) system;
            libraryPath = null;
          }
          // args
        );
    in
    {
      overlays.default = final: prev: { cuda-sandbox = final.callPackage cudaSandbox { }; };

      packages = forAllSystems (pkgs: rec {
        cuda-sandbox = pkgs.callPackage cudaSandbox { };
        default = cuda-sandbox;
      });

      nixosModules.default =
        { lib, pkgs, ... }:
        {
          imports = [ ./nixos-module ];
          # Built with the system's own nixpkgs, so no second nixpkgs enters the closure.
          programs.cuda-sandbox.package = lib.mkDefault (pkgs.callPackage cudaSandbox { });
        };

      lib = {
        # mkGpuCheck { pkgs, package, name ? …, features ? [ "cuda" ], expectDriver ? null,
        #              command ? null, lint ? true, runner ? … }
        # `pkgs` is the package set `package` is built with: the check and the runner are built
        # with it (the runner is `pkgs.cuda-sandbox` with the overlay, else the same callPackage
        # the NixOS module uses), so no second Nixpkgs and no second Rust build enter.
        mkGpuCheck =
          args@{
            pkgs ? throw "cuda-sandbox.lib.mkGpuCheck: pass `pkgs`, the package set your package is built with: mkGpuCheck { inherit pkgs; package = …; }",
            package,
            ...
          }:
          let
            runner = args.runner or (pkgs.cuda-sandbox or (pkgs.callPackage cudaSandbox { }));
          in
          mkGpuCheckWith { inherit pkgs runner; } (
            removeAttrs args [
              "pkgs"
              "runner"
            ]
          );
      };

      # `nix build .#tests.cuda` on a GPU builder: every check (each is also
      # `tests.cuda.<group>`), and the untagged `no-gpu`, which proves that builds that do not
      # ask see nothing. The aggregate itself is an untagged link farm.
      legacyPackages = forAllSystems (
        pkgs:
        let
          checks = removeAttrs (gpuTests pkgs { }) [ "all" ];
        in
        {
          tests.cuda =
            pkgs.linkFarm "cuda-sandbox-tests-cuda" {
              inherit (gpuTests pkgs { }) all no-gpu;
            }
            // checks;
        }
      );

      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          inputsFrom = [ self.packages.${pkgs.stdenv.hostPlatform.system}.default ];
          packages = [
            pkgs.clippy
            pkgs.rustfmt
            pkgs.rust-analyzer
            pkgs.nixfmt
          ];
        };
      });

      formatter = forAllSystems (pkgs: pkgs.nixfmt);

      checks = forAllSystems (
        pkgs:
        let
          inherit (pkgs.stdenv.hostPlatform) system;
          package = self.packages.${system}.default;
        in
        {
          # The cargo tests run in its build (those needing root or a daemon skip there).
          inherit package;

          # The module's evaluation test, with this nixpkgs' lib, and its rendered configs
          # validated by the hook built here.
          module-eval =
            let
              result = import ./nix-tests/module-eval.nix { inherit lib; };
            in
            pkgs.runCommand "cuda-sandbox-module-eval"
              {
                nativeBuildInputs = [ package ];
                configs = lib.attrValues (lib.mapAttrs pkgs.writeText result.configs);
              }
              # --content-only: inside the sandbox the store file is owned by an unmapped uid;
              # the hook's own ownership check is tested elsewhere (hook/tests/cli.rs).
              ''
                for c in $configs; do cuda-sandbox-hook check-config --content-only --config "$c"; done
                echo "${toString result.passed} evaluation checks passed" > $out
              '';

          # The real module in a real NixOS system: the rendered config.toml is accepted by the
          # hook, and nix.conf keeps Nix's default features besides the module's.
          nixos-config =
            let
              nixos = lib.nixosSystem {
                modules = [
                  self.nixosModules.default
                  {
                    nixpkgs.hostPlatform = system;
                    programs.cuda-sandbox.enable = true;
                    hardware.graphics.enable = true;
                    boot.loader.grub.enable = false;
                    fileSystems."/".device = "/dev/null";
                    system.stateVersion = lib.trivial.release;
                  }
                ];
              };
              etc = nixos.config.environment.etc;
            in
            pkgs.runCommand "cuda-sandbox-nixos-config" { nativeBuildInputs = [ package ]; } ''
              cuda-sandbox-hook check-config --content-only --config ${etc."cuda-sandbox/config.toml".source}
              conf=${etc."nix/nix.conf".source}
              line=$(grep '^system-features = ' $conf)
              for f in nixos-test benchmark big-parallel kvm cuda gpu nvidia-gpu opengl; do
                case "$line " in
                  *" $f "*) ;;
                  *) echo "nix.conf: $f missing from: $line" >&2; exit 1 ;;
                esac
              done
              grep -qxF 'pre-build-hook = ${package}/bin/cuda-sandbox-hook' $conf
              touch $out
            '';

          # NixOS VM: the module with a fake device tree and the fake driver; a tagged
          # derivation built through the real daemon passes the GPU checks, an untagged one sees
          # nothing. Needs KVM (or patience) on x86_64-linux/aarch64-linux.
          inherit (package.tests) vm;
        }
      );
    };
}
