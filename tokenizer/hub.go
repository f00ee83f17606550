package tokenizer

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// hubFiles are the files downloaded for a model; only the first is required.
var hubFiles = []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}

// maxHubFile bounds the size of one downloaded file.
const maxHubFile = 512 << 20

// validRepo is an ORG/NAME model id as the hub spells them.
var validRepo = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)

// validRev is a commit or branch name safe as a directory name.
var validRev = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// hubDownload fetches a model's tokenizer files from the hub at
// Config.HubURL into the cache layout under Config.HFCache
// (models--ORG--NAME/snapshots/COMMIT/ and refs/main) and returns the
// snapshot directory.
func (r *Registry) hubDownload(name string) (string, error) {
	if !validRepo.MatchString(name) || strings.Contains(name, "..") {
		return "", fmt.Errorf("%w %q", ErrUnknownModel, name)
	}
	repo := filepath.Join(r.cfg.HFCache, "models--"+strings.ReplaceAll(name, "/", "--"))
	tmp, err := os.MkdirTemp(r.cfg.HFCache, ".download-")
	if err != nil {
		return "", fmt.Errorf("tokenizer: download %s: %w", name, err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	commit := ""
	for i, file := range hubFiles {
		rev, err := r.hubFetch(name, file, filepath.Join(tmp, file))
		switch {
		case errors.Is(err, errHubMissing) && i > 0:
			continue
		case errors.Is(err, errHubMissing):
			return "", fmt.Errorf("%w %q (not on the hub: %w)", ErrUnknownModel, name, err)
		case err != nil:
			return "", fmt.Errorf("tokenizer: download %s: %w", name, err)
		}
		if commit == "" {
			commit = rev
		}
	}
	if !validRev.MatchString(commit) {
		commit = "main"
	}
	snapshot := filepath.Join(repo, "snapshots", commit)
	if err := os.MkdirAll(filepath.Dir(snapshot), 0o755); err != nil {
		return "", fmt.Errorf("tokenizer: download %s: %w", name, err)
	}
	if err := os.Rename(tmp, snapshot); err != nil && !errors.Is(err, os.ErrExist) {
		if _, statErr := os.Stat(filepath.Join(snapshot, "tokenizer.json")); statErr != nil {
			return "", fmt.Errorf("tokenizer: download %s: %w", name, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(repo, "refs"), 0o755); err != nil {
		return "", fmt.Errorf("tokenizer: download %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644); err != nil {
		return "", fmt.Errorf("tokenizer: download %s: %w", name, err)
	}
	return snapshot, nil
}

var errHubMissing = errors.New("no such file")

// hubFetch downloads one file of the main revision to dst and returns the
// commit the hub reports (X-Repo-Commit), if any.
func (r *Registry) hubFetch(name, file, dst string) (string, error) {
	u := strings.TrimSuffix(r.cfg.HubURL, "/") + "/" + name + "/resolve/main/" + url.PathEscape(file)
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	if r.cfg.HubToken != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.HubToken)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "", fmt.Errorf("%s: %w", file, errHubMissing)
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("%s: hub answered %s", file, resp.Status)
	}
	f, err := os.Create(dst)
	if err != nil {
		return "", err
	}
	n, err := io.Copy(f, io.LimitReader(resp.Body, maxHubFile+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > maxHubFile {
		err = fmt.Errorf("%s: larger than %d bytes", file, maxHubFile)
	}
	return resp.Header.Get("X-Repo-Commit"), err
}
