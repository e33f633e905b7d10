#!/usr/bin/env bash
# Build segprep's Dataflow worker image (deploy/Dockerfile), push it to Artifact Registry and,
# optionally, register it as a Dataflow Flex Template. Run from anywhere; builds the checkout
# this script lives in.
#
# Usage: deploy/build_image.sh --project PROJECT --region REGION [options]
#   --project P          Google Cloud project                      (or env PROJECT)
#   --region R           Artifact Registry region, e.g. europe-west1 (or env REGION)
#   --repository NAME    Docker repository in Artifact Registry, created when missing
#                        (default: segprep)
#   --tag TAG            image tag (default: the package version + the short commit)
#   --cloud_build        build on Cloud Build instead of the local Docker daemon
#   --flex_template GCS  also write a Flex Template spec there, e.g. gs://B/templates/segprep.json
#   --print              only print the commands (nothing is built, pushed or created)
#
# Prints the image URI last: pass it to deploy/submit.sh --image.
set -euo pipefail

usage() { sed -n '2,16s/^# \{0,1\}//p' "$0"; exit "${1:-2}"; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROJECT="${PROJECT:-}"
REGION="${REGION:-}"
REPOSITORY="${REPOSITORY:-segprep}"
TAG="${TAG:-}"
CLOUD_BUILD=0
FLEX_TEMPLATE=""
PRINT=0

while [[ $# -gt 0 ]]; do
  case "$1" in
    --project) PROJECT="$2"; shift 2 ;;
    --region) REGION="$2"; shift 2 ;;
    --repository) REPOSITORY="$2"; shift 2 ;;
    --tag) TAG="$2"; shift 2 ;;
    --cloud_build) CLOUD_BUILD=1; shift ;;
    --flex_template) FLEX_TEMPLATE="$2"; shift 2 ;;
    --print) PRINT=1; shift ;;
    -h|--help) usage 0 ;;
    --*-*) name="${1#--}"; echo "build_image.sh: unknown argument $1 (flags use underscores: --${name//-/_})" >&2; usage ;;
    *) echo "build_image.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ -n "$PROJECT" && -n "$REGION" ]] || { echo "build_image.sh: --project and --region are required" >&2; usage; }
if [[ -n "$FLEX_TEMPLATE" && "$FLEX_TEMPLATE" != gs://* ]]; then
  echo "build_image.sh: --flex_template must be a gs:// path" >&2; exit 2
fi

if [[ -z "$TAG" ]]; then
  version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/pyproject.toml" | head -n 1)"
  commit="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || date -u +%Y%m%d%H%M%S)"
  TAG="${version}-${commit}"
fi
REGISTRY="${REGION}-docker.pkg.dev"
IMAGE="${REGISTRY}/${PROJECT}/${REPOSITORY}/segprep:${TAG}"

run() {
  if [[ "$PRINT" == 1 ]]; then
    printf '%q ' "$@"; printf '\n'
  else
    "$@"
  fi
}

# 1. The repository (Docker format, regional), once.
if [[ "$PRINT" == 1 ]] || ! gcloud artifacts repositories describe "$REPOSITORY" \
    --project "$PROJECT" --location "$REGION" >/dev/null 2>&1; then
  run gcloud artifacts repositories create "$REPOSITORY" --project "$PROJECT" \
    --location "$REGION" --repository-format docker \
    --description "segprep Dataflow worker images"
fi

# 2. Build and push.
if [[ "$CLOUD_BUILD" == 1 ]]; then
  config="$(mktemp)"
  trap 'rm -f "$config"' EXIT
  cat > "$config" <<YAML
steps:
  - name: gcr.io/cloud-builders/docker
    env: ["DOCKER_BUILDKIT=1"]
    args: ["build", "-f", "deploy/Dockerfile", "--build-arg", "SEGPREP_IMAGE=${IMAGE}",
           "-t", "${IMAGE}", "."]
images: ["${IMAGE}"]
timeout: 3600s
options:
  machineType: E2_HIGHCPU_8
YAML
  [[ "$PRINT" == 1 ]] && cat "$config"
  run gcloud builds submit "$ROOT" --project "$PROJECT" --region "$REGION" --config "$config"
else
  run gcloud auth configure-docker "$REGISTRY" --quiet
  run env DOCKER_BUILDKIT=1 docker build -f "$ROOT/deploy/Dockerfile" \
    --build-arg "SEGPREP_IMAGE=${IMAGE}" -t "$IMAGE" "$ROOT"
  run docker push "$IMAGE"
fi

# 3. Optionally, the Flex Template spec: this image launches the job and runs the workers.
if [[ -n "$FLEX_TEMPLATE" ]]; then
  run gcloud dataflow flex-template build "$FLEX_TEMPLATE" --project "$PROJECT" \
    --image "$IMAGE" --sdk-language PYTHON \
    --metadata-file "$ROOT/deploy/flex_template_metadata.json"
fi

echo "$IMAGE"
