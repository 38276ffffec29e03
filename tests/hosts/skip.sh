# Sourced by the host scripts: skip_host NAME exits 0 after saying so when NAME is listed in
# PACKLM_SKIP_HOSTS (comma- or space-separated), for someone who opts out of a toolchain.
# CI (.ci/run) unsets the variable: it never skips a host.
skip_host() {
  case ",${PACKLM_SKIP_HOSTS:-}," in
    *",$1,"*|*" $1 "*|*",$1 "*|*" $1,"*)
      echo "SKIPPED: the $1 host and tests (PACKLM_SKIP_HOSTS=${PACKLM_SKIP_HOSTS})" >&2
      exit 0 ;;
  esac
}
