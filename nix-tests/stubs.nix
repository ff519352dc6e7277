# What the evaluation tests put in place of NixOS and Nixpkgs, which this machine does not
# have. Everything here is a STUB, kept as small and as faithful as the tests need:
#
# - `pkgs`: strings where the module only interpolates a package, and `formats.toml` with the
#   real type (copied from nixpkgs' pkgs/pkgs-lib/formats.nix) but a pure-Nix `generate`
#   (./toml.nix) instead of remarshal, which would need a build.
# - `module`: declarations of the NixOS options the module reads or sets. `nix.settings` copies
#   nixpkgs' nixos/modules/config/nix.nix: the same freeform type, `sandbox` with its default,
#   `system-features` without an option default, and the same `mkDefault` definition of Nix's
#   default features. That definition is what decides how the module must add its features,
#   so it is copied exactly; the rest (etc, systemd, hardware.graphics) is loosely typed.
{ lib }:
let
  toTOML = import ./toml.nix { inherit lib; };

  # A syntactically valid store path; nothing is built or read.
  storePath = name: "${builtins.storeDir}/00000000000000000000000000000000-${name}";
  fakePackage = name: {
    type = "derivation";
    inherit name;
    outPath = storePath name;
  };
in
{
  pkgs = {
    cuda-sandbox = fakePackage "cuda-sandbox-0.1.0";
    kmod = fakePackage "kmod";
    coreutils = fakePackage "coreutils";
    gnugrep = fakePackage "gnugrep";

    formats.toml =
      { }:
      {
        type =
          with lib.types;
          let
            valueType =
              oneOf [
                bool
                int
                float
                str
                path
                (attrsOf valueType)
                (listOf valueType)
              ]
              // {
                description = "TOML value";
              };
          in
          valueType;

        # The real generate serialises `builtins.toJSON value`; go through JSON the same way so
        # that anything JSON cannot carry fails here too.
        generate =
          name: value:
          let
            plain = builtins.fromJSON (builtins.toJSON value);
          in
          fakePackage name
          // {
            value = plain;
            text = toTOML plain;
          };
      };
  };

  module =
    { config, ... }:
    let
      loose = lib.types.attrsOf lib.types.anything;
    in
    {
      options = {
        assertions = lib.mkOption {
          type = lib.types.listOf lib.types.unspecified;
          default = [ ];
        };
        warnings = lib.mkOption {
          type = lib.types.listOf lib.types.str;
          default = [ ];
        };

        nix.settings = lib.mkOption {
          default = { };
          type = lib.types.submodule {
            # nixpkgs' semanticConfType.
            freeformType =
              with lib.types;
              let
                confAtom = nullOr (oneOf [
                  bool
                  int
                  float
                  str
                  path
                  package
                ]);
              in
              attrsOf (either confAtom (listOf confAtom));
            options = {
              sandbox = lib.mkOption {
                type = lib.types.either lib.types.bool (lib.types.enum [ "relaxed" ]);
                default = true;
              };
              system-features = lib.mkOption { type = lib.types.listOf lib.types.str; };
            };
          };
        };

        environment.etc = lib.mkOption {
          type = lib.types.attrsOf (
            lib.types.submodule {
              options.source = lib.mkOption { type = lib.types.path; };
            }
          );
          default = { };
        };

        systemd.services = lib.mkOption {
          type = lib.types.attrsOf loose;
          default = { };
        };

        hardware.graphics.enable = lib.mkOption {
          type = lib.types.bool;
          default = false;
        };
      };

      # As nixos/modules/config/nix.nix (without the gccarch-* features of a gcc.arch platform).
      config.nix.settings.system-features = lib.mkDefault [
        "nixos-test"
        "benchmark"
        "big-parallel"
        "kvm"
      ];
    };
}
