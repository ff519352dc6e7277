# Evaluation test of flake.nix's outputs, without Nixpkgs: `outputs` is called with the STUB
# `nixpkgs` input of ./stub-nixpkgs.nix (the real Nixpkgs lib; packages that are real but
# trivial derivations, each recording how it was made). So this checks the flake's shape and
# wiring — outputs present, the package's build arguments, `tests.cuda` made of tests-gpu's
# checks, mkGpuCheck's derivation and package set, the module's wiring, the checks — not that
# the package builds or the VM test passes (those need Nixpkgs). nix-tests/flake-check runs
# `nix flake check --no-build` and builds two checks for real with the same stub.
#
#   nix-instantiate --eval --strict nix-tests/flake-eval.nix --arg lib 'import /path/to/nixpkgs.lib/lib'
{ lib }:
let
  system = "x86_64-linux";

  nixpkgs = import ./stub-nixpkgs.nix { inherit lib system; };
  pkgs = nixpkgs.legacyPackages.${system};

  flake = import ../flake.nix;
  outputsWith =
    nixpkgs:
    let
      outputs = flake.outputs {
        self = outputs // {
          outPath = toString ../.;
        };
        inherit nixpkgs;
      };
    in
    outputs;
  outputs = outputsWith nixpkgs;

  package = outputs.packages.${system}.default;
  cudaTests = outputs.legacyPackages.${system}.tests.cuda;
  tests-gpu = import ../tests-gpu {
    runner = package;
    inherit system;
    libraryPath = null;
  };

  # A package that adds a GPU check of itself, as the README shows.
  # (A fake store path without string context, so that the script can be searched for it.)
  myPackage = (import ./stubs.nix { inherit lib; }).fakePackage "my-cuda-app-1.0";
  tester = outputs.lib.mkGpuCheck {
    inherit pkgs;
    package = myPackage;
    expectDriver = "host";
    command = "${myPackage}/bin/my-cuda-app --self-test";
  };
  inherit (tester) gpuCheck;
  gpuCheckNoLint =
    (outputs.lib.mkGpuCheck {
      inherit pkgs;
      package = myPackage;
      name = "plain";
      features = [ "gpu" ];
      lint = false;
    }).gpuCheck;
  # strictModules and expectMissing: flags of the package's check; expectMissing alone is refused.
  strictCheck =
    args:
    (outputs.lib.mkGpuCheck (
      {
        inherit pkgs;
        package = myPackage;
      }
      // args
    )).gpuCheck;
  # gpuCheckArgs, as writeGpuTestPython's: extra attributes, lists added to the check's own.
  hook = pkgs.writeText "writable-tmp-dir-as-home-hook" "";
  gpuCheckWithArgs =
    (outputs.lib.mkGpuCheck {
      inherit pkgs;
      package = myPackage;
      gpuCheckArgs = {
        nativeBuildInputs = [ hook ];
        requiredSystemFeatures = [ "big-parallel" ];
        HOME_NOTE = "kept";
      };
    }).gpuCheck;

  # cudaCapabilities: the cuda-sm-* features a check of a package built for them requires.
  featuresFor =
    args:
    (outputs.lib.mkGpuCheck (
      {
        inherit pkgs;
        package = myPackage;
      }
      // args
    )).gpuCheck.requiredSystemFeatures;
  withCaps = capabilities: featuresFor { cudaCapabilities = capabilities; };
  # A package as Nixpkgs' torch exposes them (passthru.cudaCapabilities), one that only passes
  # its cudaPackages through (with and without cudaSupport), and one with neither.
  torchLike = myPackage // {
    cudaCapabilities = [
      "8.9"
      "9.0"
    ];
  };
  cudaPackagesOf = capabilities: { flags.cudaCapabilities = capabilities; };
  withCudaPackages = myPackage // {
    cudaSupport = true;
    cudaPackages = cudaPackagesOf [
      "12.0"
      "7.5"
    ];
  };
  withoutCudaSupport = myPackage // {
    cudaSupport = false;
    cudaPackages = cudaPackagesOf [ "7.5" ];
  };

  # The NixOS-CUDA Hydra's selection rule (./hydra-cuda-tests.nix).
  jobsetSelects = import ./hydra-cuda-tests.nix { inherit lib; };
  # An example package in both layouts (nix-tests/readme-eval.nix evaluates the README's),
  # and the layout of before (a plain check under gpuChecks).
  myApp = pkgs.stdenv.mkDerivation (finalAttrs: {
    pname = "my-app";
    version = "1.0";
    passthru.tests.selfTest = outputs.lib.mkGpuCheck {
      inherit pkgs;
      package = finalAttrs.finalPackage;
      command = "${finalAttrs.finalPackage}/bin/my-app --self-test";
    };
    passthru.gpuChecks.plain =
      (outputs.lib.mkGpuCheck {
        inherit pkgs;
        package = finalAttrs.finalPackage;
      }).gpuCheck;
  });
  myAppDirect = pkgs.stdenv.mkDerivation (finalAttrs: {
    pname = "my-app";
    version = "1.0";
    passthru.gpuCheck =
      (outputs.lib.mkGpuCheck {
        inherit pkgs;
        package = finalAttrs.finalPackage;
      }).gpuCheck;
  });
  myAppUntagged = pkgs.stdenv.mkDerivation (finalAttrs: {
    pname = "my-app";
    version = "1.0";
    passthru.tests.selfTest = outputs.lib.mkGpuCheck {
      inherit pkgs;
      package = finalAttrs.finalPackage;
      features = [ "gpu" ];
    };
  });

  # Without flakes, as the README writes it: the module imported by path, the package from
  # package.nix by callPackage, or the module's own default (the same callPackage).
  nonFlakeWith =
    config:
    (nixpkgs.lib.nixosSystem {
      modules = [
        ../nixos-module
        config
      ];
    }).config;
  nonFlake = nonFlakeWith {
    programs.cuda-sandbox.enable = true;
    programs.cuda-sandbox.package = pkgs.callPackage ../package.nix { };
  };
  nonFlakeDefault = nonFlakeWith { programs.cuda-sandbox.enable = true; };
  # The caller's package set decides: another one (marked) builds the check and the runner.
  otherPkgs = pkgs // {
    runCommand =
      name: env: script:
      pkgs.runCommand name env script // { builtWithOtherPkgs = true; };
  };
  gpuCheckOtherPkgs = outputs.lib.mkGpuCheck {
    pkgs = otherPkgs;
    package = myPackage;
  };
  # With the overlay, the runner is the package set's own cuda-sandbox.
  # (Marked: any callPackage of the same function would give the same derivation.)
  overlaid = pkgs // {
    cuda-sandbox = (outputs.overlays.default overlaid pkgs).cuda-sandbox // {
      fromOverlay = true;
    };
  };
  gpuCheckOverlay = outputs.lib.mkGpuCheck {
    pkgs = overlaid;
    package = myPackage;
  };

  # cuda_compat available (cudaSupport, a platform NVIDIA ships it for): the runner loads it
  # first, as Nixpkgs' CUDA binaries do.
  compatHook = pkgs.writeText "auto-add-cuda-compat-runpath-hook" "";
  compatNixpkgs = import ./stub-nixpkgs.nix {
    inherit lib system;
    extraPackages.cudaPackages = {
      cuda_compat = pkgs.writeText "cuda_compat-12.9" "" // {
        meta.available = true;
      };
      autoAddCudaCompatRunpath = compatHook;
    };
  };
  compatPackage = (outputsWith compatNixpkgs).packages.${system}.default;

  # The flake's module with the stub NixOS of ./stubs.nix: the package comes from the flake.
  nixosWith =
    config:
    (nixpkgs.lib.nixosSystem {
      modules = [
        outputs.nixosModules.default
        config
      ];
    }).config;
  nixos = nixosWith { programs.cuda-sandbox.enable = true; };

  members = (lib.importTOML ../Cargo.toml).workspace.members;
  checks' = outputs.checks.${system};

  throws = value: !(builtins.tryEval (builtins.deepSeq value value)).success;

  check = what: condition: lib.assertMsg condition "flake-eval: ${what}";

  checks = [
    (check "the flake has the outputs of the issue" (
      lib.all (n: outputs ? ${n}) [
        "packages"
        "overlays"
        "nixosModules"
        "devShells"
        "legacyPackages"
        "lib"
        "checks"
      ]
    ))
    (check "packages: default is cuda-sandbox" (
      outputs.packages.${system}.cuda-sandbox.outPath == package.outPath
    ))
    (check "the package: cargoLock.lockFile is ./Cargo.lock" (
      package.args.cargoLock.lockFile == ../Cargo.lock
    ))
    (check
      "the package: autoAddDriverRunpath puts the driver link in DT_RUNPATH, alone without cuda_compat"
      (package.args.nativeBuildInputs == [ pkgs.autoAddDriverRunpath ])
    )
    (check
      "the package: with cuda_compat available, autoAddCudaCompatRunpath comes after the driver link's hook (so compat is first)"
      (
        compatPackage.args.nativeBuildInputs == [
          compatNixpkgs.legacyPackages.${system}.autoAddDriverRunpath
          compatHook
        ]
      )
    )
    (check "the package's source holds every workspace member" (
      lib.all (m: builtins.pathExists "${package.args.src}/${m}/Cargo.toml") members
    ))
    (check "the package: the fake driver goes to the `fixtures` output" (
      package.args.outputs == [
        "out"
        "fixtures"
      ]
      && lib.hasInfix "mv $out/lib/libfake_*.so $fixtures/lib/" package.args.postInstall
    ))
    (check "the package: meta.maintainers and mainProgram" (
      package.meta.mainProgram == "cuda-sandbox-hook"
      && lib.any (m: m.github or "" == "cuda-sandbox") package.meta.maintainers
    ))
    (check "the package: passthru.tests.vm is the VM test, and checks.vm is it" (
      package.tests.vm.args.name == "cuda-sandbox" && checks'.vm.drvPath == package.tests.vm.drvPath
    ))
    (check "overlays.default adds cuda-sandbox" (overlaid.cuda-sandbox.name == package.name))
    (check "tests.cuda builds all and no-gpu" (
      cudaTests.entries.all.drvPath == tests-gpu.all.drvPath
      && cudaTests.entries.no-gpu.drvPath == tests-gpu.no-gpu.drvPath
    ))
    (check "tests.cuda.<name> is each check of tests-gpu" (
      lib.all (n: cudaTests.${n}.drvPath == tests-gpu.${n}.drvPath) [
        "devices"
        "driver"
        "runtime"
        "kernel"
        "nvml"
        "mig"
        "no-gpu"
      ]
    ))
    (check "tests.cuda: the nixpkgs runner is the builder, without LD_LIBRARY_PATH (DT_RUNPATH)" (
      cudaTests.kernel.builder == "${package}/bin/cuda-sandbox-check"
      && !(cudaTests.kernel ? LD_LIBRARY_PATH)
      && cudaTests.kernel.requiredSystemFeatures == [ "cuda" ]
    ))
    (check
      "mkGpuCheck: .gpuCheck is tagged, runs the checks on the package and its closure, the lint, then the command"
      (
        gpuCheck.name == "my-cuda-app-gpu-check"
        && gpuCheck.env.requiredSystemFeatures == [ "cuda" ]
        && gpuCheck.requiredSystemFeatures == [ "cuda" ]
        && gpuCheck.env.nativeBuildInputs == [ package ]
        && lib.hasInfix ''
          cuda-sandbox-check --expect-driver host --package ${myPackage} --package-closure package-closure --report "$out/report.json"
        '' gpuCheck.script
        &&
          gpuCheck.env.exportReferencesGraph == [
            "package-closure"
            myPackage
          ]
        && lib.hasInfix "cuda-sandbox-check lint ${myPackage}" gpuCheck.script
        && lib.hasInfix "${myPackage}/bin/my-cuda-app --self-test" gpuCheck.script
        && !(lib.hasInfix "--no-manifest" gpuCheck.script)
      )
    )
    (check
      "mkGpuCheck: the tester is untagged, runnable (meta.mainProgram, bin/), the same steps outside any sandbox: no manifest, the closure from nix-store, and says so"
      (
        !(tester ? requiredSystemFeatures)
        && tester.name == "tester-my-cuda-app-gpu-check"
        && tester.meta.mainProgram == "my-cuda-app-gpu-check"
        && lib.hasInfix ''cp "$scriptPath" "$out/bin/"my-cuda-app-gpu-check'' tester.script
        && lib.hasInfix ''
          cuda-sandbox-check --expect-driver host --package ${myPackage} --no-manifest --report "$out/report.json" "$@"
        '' tester.env.script
        && !(lib.hasInfix "package-closure" tester.env.script)
        && lib.hasInfix "cuda-sandbox-check lint --no-manifest ${myPackage}" tester.env.script
        && lib.hasInfix "${myPackage}/bin/my-cuda-app --self-test" tester.env.script
        && lib.hasInfix "outside the Nix sandbox" tester.env.script
        && lib.hasInfix "PATH=${builtins.unsafeDiscardStringContext package.outPath}/bin" (
          builtins.unsafeDiscardStringContext tester.env.script
        )
        && tester.gpuCheck.drvPath == gpuCheck.drvPath
        && gpuCheck.tester.drvPath == tester.drvPath
        && tester.package == myPackage
      )
    )
    (check "mkGpuCheck: strictModules and expectMissing become --strict-modules and --expect-missing" (
      lib.hasInfix
        "--package ${myPackage} --package-closure package-closure --strict-modules --expect-missing '*_sm90a_*' --expect-missing only_at_80"
        (strictCheck {
          strictModules = true;
          expectMissing = [
            "*_sm90a_*"
            "only_at_80"
          ];
        }).script
      && !(lib.hasInfix "--strict-modules" gpuCheck.script)
      && throws (strictCheck { expectMissing = [ "k" ]; }).script
    ))
    (check "mkGpuCheck: gpuCheckArgs pass through, their lists added to the check's own" (
      gpuCheckWithArgs.env.nativeBuildInputs == [
        package
        hook
      ]
      &&
        gpuCheckWithArgs.requiredSystemFeatures == [
          "cuda"
          "big-parallel"
        ]
      && gpuCheckWithArgs.HOME_NOTE == "kept"
      &&
        gpuCheckWithArgs.env.exportReferencesGraph == [
          "package-closure"
          myPackage
        ]
    ))
    (check
      "the CUDA Hydra's selection: passthru.tests.<name> = mkGpuCheck … is selected (tests.selfTest.gpuCheck), the old gpuChecks layout is not"
      (
        jobsetSelects myApp == {
          tests.selfTest.gpuCheck = true;
        }
        && myApp.tests.selfTest.gpuCheck.requiredSystemFeatures == [ "cuda" ]
        && lib.hasInfix "--package ${builtins.unsafeDiscardStringContext myApp.outPath}" (
          builtins.unsafeDiscardStringContext myApp.tests.selfTest.gpuCheck.script
        )
      )
    )
    (check "the CUDA Hydra's selection: passthru.gpuCheck = (mkGpuCheck …).gpuCheck is selected" (
      jobsetSelects myAppDirect == { gpuCheck = true; }
    ))
    (check "the CUDA Hydra's selection: a check tagged without cuda is not (control)" (
      jobsetSelects myAppUntagged == { }
    ))
    (check "without flakes: imports = [ nixos-module ] and package = pkgs.callPackage package.nix { }" (
      nonFlake.nix.settings.pre-build-hook == "${package}/bin/cuda-sandbox-hook"
      && nonFlakeDefault.nix.settings.pre-build-hook == "${package}/bin/cuda-sandbox-hook"
    ))
    (check
      "mkGpuCheck: cudaCapabilities require the lowest baseline among them (a conjunction cannot say any-of)"
      (
        withCaps [
          "8.6"
          "8.9"
          "9.0"
        ] == [
          "cuda"
          "cuda-sm-86"
        ]
        &&
          withCaps [
            "10.0"
            "8.9"
            "12.0"
          ] == [
            "cuda"
            "cuda-sm-89"
          ]
        &&
          withCaps [ "7.5" ] == [
            "cuda"
            "cuda-sm-75"
          ]
        && withCaps [ ] == [ "cuda" ]
        && withCaps null == [ "cuda" ]
      )
    )
    (check "mkGpuCheck: an 'a' or 'f' capability requires its own feature, beside the lowest baseline" (
      withCaps [ "9.0a" ] == [
        "cuda"
        "cuda-sm-90a"
      ]
      &&
        withCaps [ "10.0f" ] == [
          "cuda"
          "cuda-sm-100f"
        ]
      &&
        withCaps [
          "8.6"
          "9.0a"
          "10.0f"
          "10.0a"
          "9.0a"
        ] == [
          "cuda"
          "cuda-sm-86"
          "cuda-sm-90a"
          "cuda-sm-100f"
          "cuda-sm-100a"
        ]
    ))
    (check
      "mkGpuCheck: cudaCapabilities default to the package's own (passthru.cudaCapabilities, else cudaPackages.flags with cudaSupport)"
      (
        featuresFor { package = torchLike; } == [
          "cuda"
          "cuda-sm-89"
        ]
        &&
          featuresFor { package = withCudaPackages; } == [
            "cuda"
            "cuda-sm-75"
          ]
        && featuresFor { package = withoutCudaSupport; } == [ "cuda" ]
        && featuresFor { } == [ "cuda" ]
        &&
          featuresFor {
            package = torchLike;
            cudaCapabilities = [ "9.0a" ];
          } == [
            "cuda"
            "cuda-sm-90a"
          ]
      )
    )
    (check "mkGpuCheck: the cuda-sm-* features come after features, before gpuCheckArgs' own" (
      featuresFor {
        features = [ "gpu" ];
        cudaCapabilities = [ "8.0" ];
        gpuCheckArgs.requiredSystemFeatures = [ "big-parallel" ];
      } == [
        "gpu"
        "cuda-sm-80"
        "big-parallel"
      ]
    ))
    (check "mkGpuCheck: a capability that is not one (sm_90, 9, 9.0+PTX) fails evaluation" (
      lib.all (c: throws (withCaps [ c ])) [
        "sm_90"
        "9"
        "9.0+PTX"
        "9.0b"
      ]
    ))
    (check "mkGpuCheck: name, features and lint = false" (
      gpuCheckNoLint.name == "plain"
      && gpuCheckNoLint.env.requiredSystemFeatures == [ "gpu" ]
      && !(lib.hasInfix "lint" gpuCheckNoLint.script)
    ))
    (check "mkGpuCheck: built with the caller's pkgs (no Nixpkgs of its own)" (
      (gpuCheckOtherPkgs.builtWithOtherPkgs or false)
      && (gpuCheckOtherPkgs.gpuCheck.builtWithOtherPkgs or false)
    ))
    (check "mkGpuCheck: with the overlay, the runner is pkgs.cuda-sandbox (no second Rust build)" (
      map (p: p.fromOverlay or false) gpuCheckOverlay.gpuCheck.env.nativeBuildInputs == [ true ]
    ))
    (check "mkGpuCheck: without pkgs it fails, naming it" (
      throws (outputs.lib.mkGpuCheck { package = myPackage; })
    ))
    (check "nixosModules.default: the hook is the flake's package, on PATH too" (
      nixos.nix.settings.pre-build-hook == "${package}/bin/cuda-sandbox-hook"
      && lib.elem package.outPath (map (p: p.outPath) nixos.environment.systemPackages)
    ))
    (check "checks: CPU checks and the VM test" (
      builtins.attrNames checks' == [
        "module-eval"
        "nixos-config"
        "package"
        "vm"
      ]
    ))
    (check
      "checks: module-eval and nixos-config check the configs' content (the store file is not root's in a build)"
      (
        lib.hasInfix "check-config --content-only" checks'.module-eval.script
        && lib.hasInfix "check-config --content-only" checks'.nixos-config.script
      )
    )
    # The stub's nixosSystem refuses `system` (./stub-nixpkgs.nix), so instantiating the check
    # proves the flake does not pass it; the legacy call fails there.
    (check "checks.nixos-config: nixosSystem without the legacy `system` argument" (
      !(throws checks'.nixos-config.drvPath)
      &&
        throws
          (nixpkgs.lib.nixosSystem {
            inherit system;
            modules = [ ];
          }).config
    ))
    (check "devShells.default" (outputs.devShells.${system}.default.name == "shell"))
  ];
in
assert lib.all lib.id checks;
{
  passed = lib.length checks;
}
