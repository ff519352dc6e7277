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

      # The package (./package.nix): the overlay, the flake's packages, the NixOS module's
      # default and mkGpuCheck all `callPackage` it with the package set they are given.
      cudaSandbox = ./package.nix;

      # The cuda-sm-* system features (Nixpkgs' convention, `cuda-sandbox-check features`)
      # that a check of code built for `capabilities` ("8.6", "9.0a", "10.0f"; null or [ ]:
      # none) requires. Nix's features are a conjunction and cannot say "any of", so: the
      # lowest baseline among them (a GPU of that capability or later advertises it), and
      # each arch-specific ('a') or family-specific ('f') capability's own feature, which
      # only the GPUs that run that code advertise (several need a host whose GPUs together
      # have them all).
      cudaSmFeatures =
        capabilities:
        let
          parse =
            capability:
            let
              m = builtins.match "([0-9]+)\\.([0-9])([af]?)" capability;
            in
            if m == null then
              throw "cuda-sandbox.lib.mkGpuCheck: cudaCapabilities: ${builtins.toJSON capability} is not a compute capability such as \"8.6\", \"9.0a\" or \"10.0f\""
            else
              {
                version = "${builtins.elemAt m 0}.${builtins.elemAt m 1}";
                feature = "cuda-sm-${builtins.elemAt m 0}${builtins.elemAt m 1}${builtins.elemAt m 2}";
                baseline = builtins.elemAt m 2 == "";
              };
          parsed = map parse (if capabilities == null then [ ] else capabilities);
          baselines = builtins.filter (c: c.baseline) parsed;
          lowest = builtins.foldl' (
            low: c: if builtins.compareVersions c.version low.version < 0 then c else low
          ) (builtins.head baselines) baselines;
          specific = builtins.filter (c: !c.baseline) parsed;
        in
        lib.optional (baselines != [ ]) lowest.feature ++ lib.unique (map (c: c.feature) specific);

      # The GPU check of `package`, in the shape of Nixpkgs' `cudaPackages.writeGpuTestPython`
      # (what the NixOS-CUDA Hydra collects: docs/architecture.md): a runnable tester, whose
      # `.gpuCheck` is the tagged derivation that runs the same steps in a GPU builder's
      # sandbox. The steps: the runner's checks with the package under test, the ELF lint of
      # `package`, then `command` (the package's own GPU test).
      mkGpuCheckWith =
        { pkgs, runner }:
        {
          package,
          name ? "${lib.getName package}-gpu-check",
          features ? [ "cuda" ],
          # The compute capabilities `package` was built for, as Nixpkgs writes them ("8.9",
          # "9.0a"): its own where Nixpkgs exposes them (`passthru.cudaCapabilities`, as torch
          # has; else, with `cudaSupport`, its `cudaPackages.flags.cudaCapabilities`). Adds the
          # cuda-sm-* features of `cudaSmFeatures` above; null or [ ]: none.
          cudaCapabilities ?
            package.cudaCapabilities or (
              if package.cudaSupport or false then package.cudaPackages.flags.cudaCapabilities or null else null
            ),
          # `host`, `compat` or a path prefix for the loaded libcuda.so.1; null: the hook's choice.
          expectDriver ? null,
          # Shell commands run last, with $out existing (e.g. "${package}/bin/my-gpu-test").
          command ? null,
          lint ? true,
          # Extra attributes of `.gpuCheck` (as writeGpuTestPython's): lists such as
          # nativeBuildInputs and requiredSystemFeatures are added to the check's own.
          gpuCheckArgs ? { },
        }:
        let
          # The one list of steps, for both places. In a build: the hook's manifest says which
          # driver the build was given, and exportReferencesGraph wrote the package's closure
          # (there is no store database to ask). Outside: no manifest exists, so the checks
          # judge the host's driver on their own, and the runner asks nix-store for the closure.
          steps =
            { inBuild }:
            let
              manifest = lib.optionalString (!inBuild) " --no-manifest";
              expect = lib.optionalString (
                expectDriver != null
              ) " --expect-driver ${lib.escapeShellArg expectDriver}";
              closure = lib.optionalString inBuild " --package-closure package-closure";
              extra = lib.optionalString (!inBuild) " \"$@\"";
            in
            ''
              cuda-sandbox-check${expect} --package ${package}${closure}${manifest} --report "$out/report.json"${extra}
              ${lib.optionalString lint "cuda-sandbox-check lint${manifest} ${package}"}
              ${lib.optionalString (command != null) command}
            '';

          gpuCheck = pkgs.runCommand name (
            gpuCheckArgs
            // {
              requiredSystemFeatures =
                features ++ cudaSmFeatures cudaCapabilities ++ gpuCheckArgs.requiredSystemFeatures or [ ];
              nativeBuildInputs = [ runner ] ++ gpuCheckArgs.nativeBuildInputs or [ ];
              # The package's runtime closure, for the package::* checks.
              exportReferencesGraph = [
                "package-closure"
                package
              ]
              ++ gpuCheckArgs.exportReferencesGraph or [ ];
              passthru = {
                inherit package tester;
              }
              // gpuCheckArgs.passthru or { };
            }
          ) "mkdir -p $out\n${steps { inBuild = true; }}";

          # `nix run`, or its bin/: the same steps on this machine, against the host's driver,
          # outside any sandbox. Arguments go to the first `cuda-sandbox-check`.
          tester =
            pkgs.runCommand "tester-${name}"
              {
                script = ''
                  #!${pkgs.runtimeShell}
                  # ${name}: the GPU checks of ${package}, on this machine.
                  set -eu
                  PATH=${runner}/bin''${PATH:+:$PATH}
                  out=$(mktemp -d "''${TMPDIR:-/tmp}/${name}.XXXXXX")
                  echo "${name}: outside the Nix sandbox: checking this machine's GPU and driver, without a hook manifest (--no-manifest); report: $out/report.json" >&2
                  ${steps { inBuild = false; }}
                  echo "${name}: passed" >&2
                '';
                passAsFile = [ "script" ];
                passthru = { inherit package gpuCheck; };
                meta.mainProgram = name;
              }
              ''
                mkdir -p "$out/bin"
                cp "$scriptPath" "$out/bin/"${lib.escapeShellArg name}
                chmod +x "$out/bin/"${lib.escapeShellArg name}
              '';
        in
        tester;

      # A NixOS test whose containers (`containers.<name>`, systemd-nspawn inside the test's
      # build sandbox) get the GPU the hook gives that build (./nixos-module/test-container.nix,
      # in every container of the test), with the runner's checks run in each container before
      # the test's own script. The test's derivation asks for `cuda` (the hook's tag) and
      # `uid-range` (Nix runs it as root of a user namespace of its own, which systemd-nspawn
      # needs; the builder must set `auto-allocate-uids`), and binds the build's /run where the
      # containers' launchers read it before the test driver mounts a tmpfs over /run.
      runGpuContainerTestWith =
        { pkgs, runner }:
        test:
        let
          base = pkgs.testers.runNixOSTest test;
          names = lib.attrNames base.config.containers;
          # The name the test script knows a machine by: the test driver's pythonize_name
          # (nixos/lib/test-driver/src/test_driver/driver.py).
          pythonName =
            name:
            let
              head = lib.substring 0 1 name;
              tail = lib.substring 1 (-1) name;
            in
            (if builtins.match "[A-Za-z_]" head == null then "_" else head)
            + lib.stringAsChars (c: if builtins.match "[A-Za-z0-9_]" c == null then "_" else c) tail;
          checks = lib.concatMapStrings (name: ''
            with subtest("cuda-sandbox: the GPU this build was given, in container ${name}"):
                print(${pythonName name}.succeed("cuda-sandbox-check --report /tmp/cuda-sandbox-report.json 2>&1"))
          '') names;
          original = base.config.testScript;
          withGpu = base.extend {
            modules = [
              {
                containers = lib.genAttrs names (_: {
                  imports = [ ./nixos-module/test-container.nix ];
                  cuda-sandbox.testContainer = {
                    enable = true;
                    package = runner;
                  };
                });
                testScript = lib.mkForce (
                  args: checks + (if lib.isFunction original then original args else original)
                );
              }
            ];
          };
          # nixos-module/test-container.nix's savedRun.
          savedRun = "/cuda-sandbox-run";
        in
        withGpu.overrideTestDerivation (old: {
          requiredSystemFeatures = old.requiredSystemFeatures ++ [
            "cuda"
            "uid-range"
          ];
          nativeBuildInputs = old.nativeBuildInputs or [ ] ++ [ pkgs.util-linux ];
          buildCommand = ''
            # The test driver hides /run (a tmpfs over it, as this build cannot write it): keep
            # the build's /run, with the hook's mounts below it, where the containers read it.
            mkdir -p ${savedRun}
            mount --rbind /run ${savedRun}
          ''
          + old.buildCommand;
        });

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

      # The module's default package is ./package.nix built with the system's own Nixpkgs
      # (`pkgs.cuda-sandbox` when the overlay is used), so no second Nixpkgs enters the closure.
      nixosModules.default = {
        imports = [ ./nixos-module ];
      };
      # For a container of a NixOS test: the GPU the hook gave the test's build
      # (cuda-sandbox.testContainer.enable; lib.runGpuContainerTest imports it for you).
      nixosModules.testContainer = {
        imports = [ ./nixos-module/test-container.nix ];
      };

      lib = {
        # mkGpuCheck { pkgs, package, name ? …, features ? [ "cuda" ], cudaCapabilities ? …,
        #              expectDriver ? null, command ? null, lint ? true, gpuCheckArgs ? { },
        #              runner ? … }
        # returns the tester (`nix run` it: the checks on this machine, outside any sandbox);
        # its `.gpuCheck` is the derivation tagged `features`, for GPU builders and the
        # NixOS-CUDA Hydra (which builds `<pkg>.passthru.tests.<name>.gpuCheck`).
        # `pkgs` is the package set `package` is built with: the check and the runner are built
        # with it (the runner is `pkgs.cuda-sandbox` with the overlay, else ./package.nix by
        # the same callPackage the NixOS module uses), so no second Nixpkgs and no second Rust
        # build enter.
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
        # runGpuContainerTest { pkgs, test, runner ? … } is pkgs.testers.runNixOSTest test,
        # with every container of the test given the GPU the hook gives the test's build
        # (nixosModules.testContainer), the runner's checks run in each container first, and
        # the derivation tagged `cuda` and `uid-range` (docs/nixos-tests.md).
        runGpuContainerTest =
          args@{
            pkgs ? throw "cuda-sandbox.lib.runGpuContainerTest: pass `pkgs`, the package set of the test: runGpuContainerTest { inherit pkgs; test = …; }",
            test,
            ...
          }:
          runGpuContainerTestWith {
            inherit pkgs;
            runner = args.runner or (pkgs.cuda-sandbox or (pkgs.callPackage cudaSandbox { }));
          } test;
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

          # `nix build .#tests.cudaContainer` on a GPU builder whose Nix has auto-allocate-uids
          # and the uid-range feature: NVIDIA's saxpy in a NixOS test container that gets the
          # build's GPU (nix-tests/gpu-container.nix, docs/nixos-tests.md).
          tests.cudaContainer = import ./nix-tests/gpu-container.nix {
            pkgs = import nixpkgs {
              inherit (pkgs.stdenv.hostPlatform) system;
              config = {
                allowUnfree = true;
                cudaSupport = true;
              };
              overlays = [ self.overlays.default ];
            };
            inherit (self.lib) runGpuContainerTest;
          };
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
              # the hook's own ownership check is tested elsewhere (hook/tests/cli/).
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
