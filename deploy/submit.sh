#!/usr/bin/env bash
# Run `segprep prepare` on Dataflow.
#
# Usage: deploy/submit.sh --project P --region R --bucket B \
#            --image_dir gs://... --mask_dir gs://... --output_dir gs://... [options] [-- FLAGS]
#   --image IMAGE          worker image from deploy/build_image.sh (default packaging; env IMAGE)
#   --setup_file           package this checkout instead: every worker pip-installs segprep and
#                          TensorFlow at start-up (minutes per worker, needs internet access)
#   --service_account SA   workers' service account email (deploy/README.md lists its roles)
#   --max_workers N        autoscaling ceiling, the cost cap (default 10)
#   --machine_type TYPE    worker machine type (default n1-standard-4)
#   --flex_template GCS    launch the Flex Template spec at GCS (build_image.sh --flex_template)
#                          instead of submitting from this machine
#   --wait                 block until the job ends and print segprep's summary (default:
#                          return once submitted, printing the job id and console link)
#   --dry_run              print the job that would be submitted (segprep --dry_run) and stop;
#                          with --flex_template, print the gcloud command instead
#   -- FLAGS               passed on: segprep/Beam flags, or name=value template parameters
#
# Flags are spelled like segprep's and Beam's: with underscores.
# Temporary and staging files go to gs://B/tmp and gs://B/staging. The job name is
# segprep-UTCDATE-UTCTIME; watch it with `gcloud dataflow jobs list --region R`.
set -euo pipefail

usage() { sed -n '2,25s/^# \{0,1\}//p' "$0"; exit "${1:-2}"; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SEGPREP="${SEGPREP:-segprep}"
PROJECT="${PROJECT:-}"
REGION="${REGION:-}"
BUCKET="${BUCKET:-}"
IMAGE="${IMAGE:-}"
IMAGE_DIR="" MASK_DIR="" OUTPUT_DIR=""
SETUP_FILE=0 SERVICE_ACCOUNT="" MAX_WORKERS="${MAX_WORKERS:-10}"
MACHINE_TYPE="${MACHINE_TYPE:-n1-standard-4}" FLEX_TEMPLATE="" DRY_RUN=0 WAIT=0
EXTRA=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    --project) PROJECT="$2"; shift 2 ;;
    --region) REGION="$2"; shift 2 ;;
    --bucket) BUCKET="${2#gs://}"; BUCKET="${BUCKET%/}"; shift 2 ;;
    --image_dir) IMAGE_DIR="$2"; shift 2 ;;
    --mask_dir) MASK_DIR="$2"; shift 2 ;;
    --output_dir) OUTPUT_DIR="$2"; shift 2 ;;
    --image) IMAGE="$2"; shift 2 ;;
    --setup_file) SETUP_FILE=1; shift ;;
    --service_account) SERVICE_ACCOUNT="$2"; shift 2 ;;
    --max_workers) MAX_WORKERS="$2"; shift 2 ;;
    --machine_type) MACHINE_TYPE="$2"; shift 2 ;;
    --flex_template) FLEX_TEMPLATE="$2"; shift 2 ;;
    --dry_run) DRY_RUN=1; shift ;;
    --wait) WAIT=1; shift ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) usage 0 ;;
    --*-*) name="${1#--}"; echo "submit.sh: unknown argument $1 (flags use underscores: --${name//-/_})" >&2; usage ;;
    *) echo "submit.sh: unknown argument $1 (segprep/Beam flags go after --)" >&2; usage ;;
  esac
done

missing=()
for name in PROJECT REGION BUCKET IMAGE_DIR MASK_DIR OUTPUT_DIR; do
  [[ -n "${!name}" ]] || missing+=("--$(tr '[:upper:]' '[:lower:]' <<<"$name")")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "submit.sh: missing ${missing[*]}" >&2; usage
fi
if [[ -z "$FLEX_TEMPLATE" && "$SETUP_FILE" == 0 && -z "$IMAGE" ]]; then
  echo "submit.sh: pass --image IMAGE (from deploy/build_image.sh) or --setup_file" >&2; exit 2
fi

JOB_NAME="segprep-$(date -u +%Y%m%d-%H%M%S)"
TEMP="gs://${BUCKET}/tmp"
STAGING="gs://${BUCKET}/staging"

if [[ -n "$FLEX_TEMPLATE" ]]; then
  # Template parameters in gcloud's list syntax with '~' as separator (paths may hold commas).
  parameters="^~^image_dir=${IMAGE_DIR}~mask_dir=${MASK_DIR}~output_dir=${OUTPUT_DIR}"
  for pair in "${EXTRA[@]+"${EXTRA[@]}"}"; do parameters+="~${pair}"; done
  command=(gcloud dataflow flex-template run "$JOB_NAME" --project "$PROJECT"
    --region "$REGION" --template-file-gcs-location "$FLEX_TEMPLATE"
    --temp-location "$TEMP" --staging-location "$STAGING"
    --max-workers "$MAX_WORKERS" --worker-machine-type "$MACHINE_TYPE"
    --parameters "$parameters")
  [[ -n "$SERVICE_ACCOUNT" ]] && command+=(--service-account-email "$SERVICE_ACCOUNT")
  if [[ "$DRY_RUN" == 1 ]]; then
    printf '%q ' "${command[@]}"; printf '\n'
    exit 0
  fi
  exec "${command[@]}"
fi

command=("$SEGPREP" prepare --image_dir "$IMAGE_DIR" --mask_dir "$MASK_DIR"
  --output_dir "$OUTPUT_DIR" --runner DataflowRunner --project "$PROJECT" --region "$REGION"
  --temp_location "$TEMP" --staging_location "$STAGING" --job_name "$JOB_NAME"
  --max_num_workers "$MAX_WORKERS" --machine_type "$MACHINE_TYPE")
if [[ "$SETUP_FILE" == 1 ]]; then
  command+=(--setup_file "$ROOT/setup.py")
else
  command+=(--sdk_container_image "$IMAGE")
fi
[[ -n "$SERVICE_ACCOUNT" ]] && command+=(--service_account_email "$SERVICE_ACCOUNT")
[[ "$DRY_RUN" == 1 ]] && command+=(--dry_run)
[[ "$WAIT" == 1 ]] || command+=(--no_wait)
command+=("${EXTRA[@]+"${EXTRA[@]}"}")
printf '+ ' >&2; printf '%q ' "${command[@]}" >&2; printf '\n' >&2
exec "${command[@]}"
