# Derivations that report what the sandbox shows them. Used by hook/tests/nix_sandbox/.
# `nonce` forces a fresh build each run; `readPaths` are files the probe tries to read (passed
# without string context, so Nix does not add them to the sandbox by itself).
{
  nonce,
  readPaths ? "",
}:
let
  report = import ./report.nix;
  probe =
    {
      name,
      tagged ? true,
      structured ? false,
      features ? [ "cuda" ],
    }:
    derivation (
      {
        inherit name nonce;
        system = builtins.currentSystem;
        builder = "/bin/bash";
        PATH = "/bin:/usr/bin";
        READ_PATHS = builtins.unsafeDiscardStringContext readPaths;
        args = [
          "-c"
          ''
            set -u
            if [ -e .attrs.sh ]; then source .attrs.sh; out=''${outputs[out]}; fi
            {
              for d in /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools; do
                if [ -c "$d" ]; then echo "char $d $(stat -c '%Hr:%Lr' "$d")"
                elif [ -e "$d" ]; then echo "other $d"
                else echo "absent $d"; fi
              done
              if [ -e /run/opengl-driver ]; then
                echo "driver present"
                for f in $(cd /run/opengl-driver && find . -type f | sort); do
                  echo "driver-file $f $(cat "/run/opengl-driver/$f" | head -c 64 | tr '\n' ' ')"
                done
              else
                echo "driver absent"
              fi
              ${report.manifest}
              ${report.readPaths}
            } > "$out"
          ''
        ];
      }
      // (if tagged then { requiredSystemFeatures = features; } else { })
      // (if structured then { __structuredAttrs = true; } else { })
    );
in
{
  tagged = probe { name = "probe-tagged"; };
  untagged = probe {
    name = "probe-untagged";
    tagged = false;
  };
  structured = probe {
    name = "probe-structured";
    structured = true;
  };
  sm90a = probe {
    name = "probe-sm90a";
    features = [
      "cuda"
      "cuda-sm-90a"
    ];
  };
  other-feature = probe {
    name = "probe-other-feature";
    features = [ "benchmark" ];
  };
}
