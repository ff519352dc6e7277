# Derivations that report what of an AMD GPU host the sandbox shows them: device nodes, /sys,
# the driver link. Used by hook/tests/amd/. `nonce` forces a fresh build each run.
{ nonce }:
let
  probe =
    { name, tagged }:
    derivation (
      {
        inherit name nonce;
        system = builtins.currentSystem;
        builder = "/bin/bash";
        PATH = "/bin:/usr/bin";
        args = [
          "-c"
          ''
            set -u
            mkdir "$out"
            {
              echo "dev: $(ls /dev | tr '\n' ' ')"
              echo "dri: $(ls /dev/dri 2>/dev/null | tr '\n' ' ')"
              for f in /dev/kfd /dev/dri/*; do
                [ -e "$f" ] && echo "node $f $(stat -c '%F %t:%T' "$f")"
              done
              if [ -e /sys ]; then echo "sys: $(ls /sys | tr '\n' ' ')"; else echo "sys absent"; fi
              echo "sys devices: $(ls /sys/devices 2>/dev/null | tr '\n' ' ')"
              echo "sys virtual: $(ls /sys/devices/virtual 2>/dev/null | tr '\n' ' ')"
              echo "pci root: $(ls /sys/devices/pci0000:00 2>/dev/null | tr '\n' ' ')"
              echo "sys dev char: $(ls /sys/dev/char 2>/dev/null | tr '\n' ' ')"
              echo "pci devices: $(ls /sys/bus/pci/devices 2>/dev/null | tr '\n' ' ')"
              for l in /sys/dev/char/*; do
                [ -e "$l" ] || continue
                echo "char ''${l##*/} $(realpath "$l") vendor $(cat "$l/device/vendor")"
              done
              k=/sys/devices/virtual/kfd/kfd/topology
              echo "kfd nodes: $(ls $k/nodes 2>/dev/null | tr '\n' ' ')"
              for n in $k/nodes/*; do
                [ -e "$n" ] && echo "kfd node ''${n##*/} $(grep drm_render_minor "$n/properties")"
              done
              grep ' /sys/' /proc/self/mountinfo | while read -r _ _ _ _ point options _; do
                echo "mount $point $options"
              done
              if [ -e $k ]; then
                if echo 9 > $k/generation_id 2>/dev/null; then echo "kfd write succeeded"; else echo "kfd write failed"; fi
                if ln -s x /sys/dev/char/1:3 2>/dev/null; then echo "char create succeeded"; else echo "char create failed"; fi
              fi
              echo "driver: $(cat /run/opengl-driver/lib/libcuda.so.1 2>/dev/null || echo absent)"
            } > "$out/report"
          ''
        ];
      }
      // (if tagged then { requiredSystemFeatures = [ "cuda" ]; } else { })
    );
in
{
  tagged = probe {
    name = "amd-tagged";
    tagged = true;
  };
  untagged = probe {
    name = "amd-untagged";
    tagged = false;
  };
}
