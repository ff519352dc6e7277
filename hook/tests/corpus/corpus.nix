# Derivations for hook/tests/drv_differential/: each attribute is one corpus item, instantiated
# with Debian's Nix 2.8 (`nix-instantiate corpus.nix -A NAME`) and compared, field by field, with
# `nix show-derivation`. Nothing here is ever built: the builders are never run.
#
# Needs the experimental features `ca-derivations` and `impure-derivations` (the test sets them
# through NIX_CONFIG). Uses `derivation` directly: there is no nixpkgs.
#
# Items whose system is "cuda-sandbox-none" are also handed to `nix-store --realise`, which refuses
# them (no machine has that platform) with a message that lists the required system features as
# Nix itself parsed them: that is the oracle for the features `attrs()` reads. Keep every such
# item free of input derivations, and never give one a real platform, or Nix would try to build
# it.
let
  # A platform no machine has: realising such a derivation fails before anything runs.
  none = "cuda-sandbox-none";
  system = "x86_64-linux";
  mk =
    attrs:
    derivation (
      {
        builder = "/bin/sh";
        inherit system;
      }
      // attrs
    );
  mkNone = attrs: mk ({ system = none; } // attrs);

  # Raw bytes that are not UTF-8 (latin-1 / cp1252), plus control characters.
  latin1 = builtins.readFile ./latin1.bin;

  # A line full of things that need escaping in ATerm (and in JSON).
  bigLine = i: "line ${toString i}: \"quoted\" back\\slash\ttab\r cr é ✓ 🎉\n";

  plain = mk {
    name = "plain";
    args = [
      "-c"
      "echo hello"
    ];
    greeting = "hello";
  };

  multiOutput = mk {
    name = "multi-output";
    outputs = [
      "out"
      "dev"
      "lib"
    ];
    args = [
      "-c"
      "true"
    ];
  };

  caFloating = mk {
    name = "ca-floating";
    __contentAddressed = true;
    outputHashMode = "recursive";
    outputHashAlgo = "sha256";
    outputs = [
      "out"
      "dev"
    ];
  };
in
{
  inherit plain;

  structured = mkNone {
    name = "structured";
    __structuredAttrs = true;
    requiredSystemFeatures = [
      "cuda"
      "big-parallel"
    ];
    nested = {
      list = [
        1
        2.5
        true
        null
        "x\"y\\z\n\t\r é 🎉"
      ];
      empty = { };
    };
    "key \"quoted\"" = "value\\";
  };

  structured-no-features = mkNone {
    name = "structured-no-features";
    __structuredAttrs = true;
    other = [ "cuda" ];
  };

  structured-empty-features = mkNone {
    name = "structured-empty-features";
    __structuredAttrs = true;
    requiredSystemFeatures = [ ];
  };

  structured-duplicates = mkNone {
    name = "structured-duplicates";
    __structuredAttrs = true;
    requiredSystemFeatures = [
      "gpu"
      "cuda"
      "gpu"
      " spaced feature "
    ];
  };

  # Nix: "attribute 'requiredSystemFeatures' of derivation … must be a list of strings".
  structured-not-a-list = mkNone {
    name = "structured-not-a-list";
    __structuredAttrs = true;
    requiredSystemFeatures = "cuda";
  };

  # Same error from Nix: null is not a list of strings.
  structured-null = mkNone {
    name = "structured-null";
    __structuredAttrs = true;
    requiredSystemFeatures = null;
  };

  # Nix writes the raw bytes into __json, then cannot parse its own __json when building
  # ("ill-formed UTF-8 byte").
  structured-latin1 = mkNone {
    name = "structured-latin1";
    __structuredAttrs = true;
    requiredSystemFeatures = [ "cuda" ];
    text = latin1;
  };

  structured-latin1-feature = mkNone {
    name = "structured-latin1-feature";
    __structuredAttrs = true;
    requiredSystemFeatures = [
      "cuda"
      "x${latin1}"
    ];
  };

  multi-output = multiOutput;

  fod-flat = mk {
    name = "fod-flat";
    outputHashMode = "flat";
    outputHashAlgo = "sha256";
    outputHash = "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=";
  };

  fod-recursive = mk {
    name = "fod-recursive";
    outputHashMode = "recursive";
    outputHashAlgo = "sha512";
    outputHash = "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e";
  };

  ca-floating = caFloating;

  impure = mk {
    name = "impure";
    __impure = true;
  };

  # Input derivations (two outputs of one, the default output of another) and input sources
  # (a path literal, a toFile, a .drv referenced without its outputs).
  deps = mk {
    name = "deps";
    args = [
      "-c"
      "${multiOutput.dev}/bin/x ${multiOutput.lib} ${plain}"
    ];
    src = ./data-file;
    script = builtins.toFile "script.sh" "echo \"from toFile\"\n";
    drvOnly = "${builtins.unsafeDiscardOutputDependency plain.drvPath}";
  };

  # Depends on a floating content-addressed output, whose path is not known yet: Nix defers
  # this derivation's own output path (empty in the .drv, `{}` in the JSON).
  deps-deferred = mk {
    name = "deps-deferred";
    caDev = "${caFloating.dev}";
  };

  strings = mk {
    name = "strings";
    args = [
      "-c"
      "printf '%s\\n' \"$x\""
      ""
      "\\"
      "\"\""
      "\\n is not a newline"
      "trailing backslash\\"
      "\n\r\t"
    ];
    quotes = "say \"hi\" and \"bye\"";
    backslashes = "C:\\path\\to\\thing \\\\ double";
    newlines = "a\nb\n\nc\n";
    tabs = "\tcol1\tcol2\t";
    crs = "dos line\r\nline2\r\n";
    unicode = "é ü ß Ω 中文 日本語 ✓";
    emoji = "🎉🚀 👩‍💻 🏳️‍🌈";
    mixed = "\"\\\n\r\t\"é🎉\\\"";
    empty = "";
    onlyEscapes = "\\\"\n\r\t\\";
    "key with \"quotes\", \\ and\nnewline" = "weird key";
    "é-key" = "unicode key";
  };

  latin1 = mkNone {
    name = "latin1";
    args = [
      "-c"
      latin1
    ];
    text = latin1;
    requiredSystemFeatures = "cuda ${latin1}";
  };

  # An environment variable whose name is not UTF-8.
  latin1-key = mk (
    {
      name = "latin1-key";
    }
    // builtins.listToAttrs [
      {
        name = "key-${latin1}";
        value = "v-${latin1}";
      }
    ]
  );

  big = mk {
    name = "big";
    args = [
      "-c"
      "true"
    ];
    big = latin1 + builtins.concatStringsSep "" (builtins.genList bigLine 120000) + latin1;
    small = "after the big one";
  };

  features-empty-string = mkNone {
    name = "features-empty-string";
    requiredSystemFeatures = "";
  };

  # A list in a plain derivation becomes a space-separated string.
  features-empty-list = mkNone {
    name = "features-empty-list";
    requiredSystemFeatures = [ ];
  };

  features-odd-whitespace = mkNone {
    name = "features-odd-whitespace";
    requiredSystemFeatures = "  cuda\t\n gpu  \r\n\tbig-parallel ";
  };

  features-duplicates = mkNone {
    name = "features-duplicates";
    requiredSystemFeatures = [
      "cuda"
      "gpu"
      "cuda"
    ];
  };

  # Vertical tab and form feed are not separators for Nix: one feature "cuda\v\fgpu".
  features-vtab = mkNone {
    name = "features-vtab";
    requiredSystemFeatures = builtins.readFile ./vtab-features.bin;
  };

  features-single = mkNone {
    name = "features-single";
    requiredSystemFeatures = "cuda";
  };

  many-env = mk (
    {
      name = "many-env";
    }
    // builtins.listToAttrs (
      builtins.genList (i: {
        name = "VAR_${toString i}";
        value = "value ${toString i} \"${toString (i * 7)}\"\n";
      }) 3000
    )
  );
}
