# Derivations that report what of /sys the sandbox shows them, and what Debian's hwloc finds
# there. Used by hook/tests/sysfs/. `nonce` forces a fresh build each run; `sleep` keeps the
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
              echo "pci devices: $(ls /sys/bus/pci/devices 2>/dev/null | tr '\n' ' ')"
              echo "pci root: $(ls /sys/devices/pci0000:00 2>/dev/null | tr '\n' ' ')"
              echo "pci buses: $(ls /sys/class/pci_bus 2>/dev/null | tr '\n' ' ')"
              echo "gpus: $(cd /dev && ls -d nvidia[0-9]* 2>/dev/null | tr '\n' ' ')"
              for d in /sys/bus/pci/devices/*; do
                [ -e "$d" ] || continue
                b=''${d##*/}
                echo "vendor $b $(cat "$d/vendor")"
                echo "nccl path $b $(realpath "/sys/class/pci_bus/''${b:0:7}/../../$b")"
                echo "bridge numa_node $b $(cat "/sys/class/pci_bus/''${b:0:7}/../../numa_node")"
                if echo 1 > "$d/numa_node" 2>/dev/null; then echo "pci write succeeded $b"; else echo "pci write failed $b"; fi
                if echo 1 > "$(realpath "$d/..")/numa_node" 2>/dev/null; then echo "bridge write succeeded $b"; else echo "bridge write failed $b"; fi
              done
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
