# Derivations that report what of /sys the sandbox shows them, and what Debian's hwloc finds
# there. Used by hook/tests/sysfs.rs. `nonce` forces a fresh build each run; `sleep` keeps the
# builder running for that many seconds first (for the test that kills a build).
{
  nonce,
  sleep ? "0",
}:
let
  probe =
    { name, tagged }:
    derivation (
      {
        inherit name nonce sleep;
        system = builtins.currentSystem;
        builder = "/bin/bash";
        PATH = "/bin:/usr/bin";
        args = [
          "-c"
          ''
            set -u
            sleep "$sleep"
            mkdir "$out"
            {
              if [ -e /sys ]; then echo "sys present: $(ls /sys | tr '\n' ' ')"; else echo "sys absent"; fi
              for d in /sys/devices/system/cpu /sys/devices/system/node; do
                if [ -d "$d" ]; then echo "dir $d: $(ls "$d" | head -3 | tr "\n" " ")"; else echo "absent $d"; fi
              done
              grep ' /sys/' /proc/self/mountinfo | while read -r _ _ _ _ point options _; do
                echo "mount $point $options"
              done
              f=/sys/devices/system/cpu/cpu0/topology/core_id
              if cat "$f" > "$f" 2>/dev/null; then echo "write succeeded $f"; else echo "write failed $f"; fi
              if touch /sys/devices/system/cpu/probe 2>/dev/null; then echo "create succeeded"; else echo "create failed"; fi
            } > "$out/report"
            lstopo-no-graphics --of xml > "$out/topology.xml" 2> "$out/lstopo.err"
            echo "lstopo exit $?" >> "$out/report"
          ''
        ];
      }
      // (if tagged then { requiredSystemFeatures = [ "cuda" ]; } else { })
    );
in
{
  tagged = probe {
    name = "sysfs-tagged";
    tagged = true;
  };
  untagged = probe {
    name = "sysfs-untagged";
    tagged = false;
  };
}
