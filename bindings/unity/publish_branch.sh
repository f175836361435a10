#!/bin/sh
# bindings/unity/publish_branch.sh <package folder> <branch> [repository]
#
# Commits the generated Unity package (build/<preset>/unity-package/package)
# as the root of <branch> in <repository> (default: this one), so Unity's
# Package Manager installs it by git URL:
#   https://host/you/weft.git#<branch>
# The working tree, the index and HEAD are not touched (a private index and
# git commit-tree); each run adds one commit on top of the branch's last.
# The native libraries go in as ordinary blobs (tens of MB; use Git LFS
# for a long-lived branch). Prints the new commit.
set -eu
[ $# -ge 2 ] || { echo "usage: publish_branch.sh <package folder> <branch> [repository]" >&2; exit 2; }
pkg=$1
branch=$2
repo=${3:-.}
[ -f "$pkg/package.json" ] || { echo "publish_branch.sh: $pkg/package.json not found (build the unity-package target)" >&2; exit 1; }
git check-ref-format --branch "$branch" >/dev/null || { echo "publish_branch.sh: '$branch' is not a branch name" >&2; exit 1; }
GIT_DIR=$(cd "$repo" && git rev-parse --absolute-git-dir)
export GIT_DIR
index=$(mktemp)
trap 'rm -f "$index"' EXIT
rm -f "$index"  # git makes it
version=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$pkg/package.json" | head -n 1)
GIT_INDEX_FILE=$index git --work-tree="$pkg" add -A -f .
tree=$(GIT_INDEX_FILE=$index git write-tree)
parent=$(git rev-parse -q --verify "refs/heads/$branch^{commit}" || true)
if [ -n "$parent" ]; then
  commit=$(git commit-tree "$tree" -p "$parent" -m "com.weft.llm $version")
else
  commit=$(git commit-tree "$tree" -m "com.weft.llm $version")
fi
git update-ref "refs/heads/$branch" "$commit" ${parent:+"$parent"}
echo "$commit"
