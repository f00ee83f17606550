package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Repo is a model's repository on a Hugging Face hub.
type Repo struct {
	// ID is the repository id, ORG/NAME.
	ID string
	// Revision is a branch, tag or commit; "" is main.
	Revision string
}

// String is ID@Revision.
func (r Repo) String() string { return r.ID + "@" + r.rev() }

func (r Repo) rev() string {
	if r.Revision == "" {
		return "main"
	}
	return r.Revision
}

// valid reports whether the repository id and revision are safe to use
// in a URL and as directory names.
func (r Repo) valid() bool {
	return validRepo.MatchString(r.ID) && !strings.Contains(r.ID, "..") &&
		validRev.MatchString(r.rev()) && !strings.Contains(r.rev(), "..")
}

// validRepo is an ORG/NAME model id as the hub spells them.
var validRepo = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)

// validRev is a commit, branch or tag name safe as a directory name.
var validRev = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// errNotCached is hfSnapshot's error for a repository revision the cache
// lacks (or holds without tokenizer.json): a download would bring it.
var errNotCached = errors.New("not in the cache")

// repoDir is the cache directory of a repository: models--ORG--NAME.
func repoDir(cache, id string) string {
	return filepath.Join(cache, "models--"+strings.ReplaceAll(id, "/", "--"))
}

// hfSnapshot finds a repository revision in a Hugging Face cache, laid out
// as the hub's own client writes it (and vLLM reads it): the snapshot that
// refs/REVISION names, else snapshots/REVISION for a commit, else for main
// the only snapshot. A snapshot without tokenizer.json (a download of the
// weights alone) does not count.
func hfSnapshot(cache string, repo Repo) (string, error) {
	if !repo.valid() {
		return "", fmt.Errorf("%w %q (not a hub repository id)", ErrUnknownModel, repo.ID)
	}
	dir := repoDir(cache, repo.ID)
	snapshots := filepath.Join(dir, "snapshots")
	found := func(snapshot string) (string, error) {
		if _, err := os.Stat(filepath.Join(snapshot, "tokenizer.json")); err != nil {
			return "", fmt.Errorf("%s: %w", repo, errNotCached)
		}
		return snapshot, nil
	}
	if ref, err := os.ReadFile(filepath.Join(dir, "refs", repo.rev())); err == nil {
		if commit := strings.TrimSpace(string(ref)); validRev.MatchString(commit) {
			return found(filepath.Join(snapshots, commit))
		}
	}
	if fi, err := os.Stat(filepath.Join(snapshots, repo.rev())); err == nil && fi.IsDir() {
		return found(filepath.Join(snapshots, repo.rev()))
	}
	if repo.rev() != "main" {
		return "", fmt.Errorf("%s: %w", repo, errNotCached)
	}
	entries, err := os.ReadDir(snapshots)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("tokenizer: %w", err)
	}
	var revs []string
	for _, e := range entries {
		if e.IsDir() {
			revs = append(revs, e.Name())
		}
	}
	sort.Strings(revs)
	switch len(revs) {
	case 0:
		return "", fmt.Errorf("%s: %w", repo, errNotCached)
	case 1:
		return found(filepath.Join(snapshots, revs[0]))
	default:
		return "", fmt.Errorf("tokenizer: %s: %d snapshots and no refs/main", dir, len(revs))
	}
}

// place moves the files downloaded into tmp into the repository's snapshot
// of commit, each with one rename: the whole directory when the snapshot
// is new, else each file the snapshot lacks (one the vLLM pods sharing the
// cache downloaded stays theirs). Then refs/REVISION names the commit when
// the revision is a branch or tag. A reader sees a snapshot without
// tokenizer.json, or a whole file, never a part of one. whole reports
// whether the snapshot is tmp's files alone.
func place(cache string, repo Repo, commit, tmp string) (snapshot string, whole bool, err error) {
	dir := repoDir(cache, repo.ID)
	snapshot = filepath.Join(dir, "snapshots", commit)
	if err := os.MkdirAll(filepath.Dir(snapshot), 0o755); err != nil {
		return "", false, err
	}
	whole = true
	if err := os.Rename(tmp, snapshot); err != nil {
		if _, statErr := os.Stat(snapshot); statErr != nil {
			return "", false, err
		}
		if err := mergeFiles(tmp, snapshot); err != nil {
			return "", false, err
		}
		whole = false
	}
	if repo.rev() != commit {
		if err := writeAtomic(filepath.Join(dir, "refs", repo.rev()), []byte(commit)); err != nil {
			return "", false, err
		}
	}
	return snapshot, whole, nil
}

// mergeFiles moves each file of src that dst lacks into dst, tokenizer.json
// last so that the snapshot counts only once the others are there.
func mergeFiles(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	sort.SliceStable(entries, func(i, j int) bool {
		return entries[i].Name() != "tokenizer.json" && entries[j].Name() == "tokenizer.json"
	})
	for _, e := range entries {
		target := filepath.Join(dst, e.Name())
		if _, err := os.Lstat(target); err == nil {
			continue
		}
		if err := os.Rename(filepath.Join(src, e.Name()), target); err != nil {
			return err
		}
	}
	return nil
}

// writeAtomic writes data to path through a temporary file and a rename.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}
