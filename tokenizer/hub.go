package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultHubURL is the public Hugging Face hub, Config.HubURL's default.
const DefaultHubURL = "https://huggingface.co"

// hubFiles are the files downloaded for a model; only the first is required.
var hubFiles = []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}

// maxHubFile bounds the size of one downloaded file.
const maxHubFile = 512 << 20

// ErrHubUnauthorized is wrapped by a download the hub refused (401, 403):
// the token (Config.HubToken, HubTokenFile) is missing, wrong, or not
// granted the repository.
var ErrHubUnauthorized = errors.New("the hub refused the token")

// errHubMissing is a file the hub does not have (404).
var errHubMissing = errors.New("no such file")

// download fetches a repository revision's tokenizer files from the hub at
// Config.HubURL into a temporary directory of Config.HFCache, checks them
// (every byte the hub announced, tokenizer.json and tokenizer_config.json
// parse), then moves them into the cache layout with renames, and returns
// the snapshot directory. The tokenizer checked is kept loaded when the
// snapshot holds its files alone (not the pods' beside them). A download
// that fails or is killed midway leaves no snapshot behind (a killed one
// leaves its temporary directory, removed by a later download).
func (r *Registry) download(ctx context.Context, name string, repo Repo) (string, error) {
	if !repo.valid() {
		return "", fmt.Errorf("%w %q: %q is not a hub repository id (ORG/NAME, revision a branch, tag or commit)", ErrUnknownModel, name, repo.String())
	}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("%w %q: download %s from %s: %w", ErrUnknownModel, name, repo, r.cfg.HubURL, err)
	}
	token, err := r.token()
	if err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(r.cfg.HFCache, 0o755); err != nil {
		return fail(err)
	}
	removeStale(r.cfg.HFCache, time.Now().Add(-staleAfter(r.cfg.HubTimeout)))
	tmp, err := os.MkdirTemp(r.cfg.HFCache, ".download-")
	if err != nil {
		return fail(err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	commit, err := r.fetchFiles(ctx, repo, token, tmp)
	if err != nil {
		return fail(err)
	}
	tok, err := Load(tmp)
	if err != nil {
		return fail(fmt.Errorf("tokenizer.json refused: %w", err))
	}
	snapshot, whole, err := place(r.cfg.HFCache, repo, commit, tmp)
	if err != nil {
		return fail(err)
	}
	if whole {
		r.keep(name, tok)
	}
	return snapshot, nil
}

// fetchFiles downloads hubFiles into dir and returns the commit the hub
// resolved the revision to: the first file's X-Repo-Commit, which the
// others are then fetched at, or the revision itself when the hub names
// none.
func (r *Registry) fetchFiles(ctx context.Context, repo Repo, token, dir string) (string, error) {
	commit := ""
	for i, file := range hubFiles {
		at := repo.rev()
		if commit != "" {
			at = commit
		}
		got, err := r.fetch(ctx, repo.ID, at, file, token, filepath.Join(dir, file))
		switch {
		case errors.Is(err, errHubMissing) && i > 0:
			continue
		case err != nil:
			return "", err
		}
		if i == 0 {
			commit = repo.rev()
			if validRev.MatchString(got) {
				commit = got
			}
		}
	}
	return commit, nil
}

// fetch downloads one file of a revision to dst and returns the commit the
// hub reports (X-Repo-Commit), if any. A body shorter than its
// Content-Length, or a JSON file that does not parse, is an error.
func (r *Registry) fetch(ctx context.Context, id, rev, file, token, dst string) (string, error) {
	u := strings.TrimSuffix(r.cfg.HubURL, "/") + "/" + id + "/resolve/" + url.PathEscape(rev) + "/" + url.PathEscape(file)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.HubTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, timedOut(ctx, errors.Unwrap(err), r.cfg.HubTimeout)) // the *url.Error repeats the URL
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "", fmt.Errorf("%s: %w (the hub answered %s)", file, errHubMissing, resp.Status)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return "", fmt.Errorf("%s: %w (%s)", file, ErrHubUnauthorized, resp.Status)
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("%s: the hub answered %s", file, resp.Status)
	}
	if err := copyChecked(dst, resp); err != nil {
		return "", fmt.Errorf("%s: %w", file, timedOut(ctx, err, r.cfg.HubTimeout))
	}
	return resp.Header.Get("X-Repo-Commit"), nil
}

// timedOut says err in words when the file's timeout ended it.
func timedOut(ctx context.Context, err error, timeout time.Duration) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("not downloaded within the timeout (HubTimeout %v): %w", timeout, err)
	}
	return err
}

// copyChecked writes resp's body to dst, refusing a truncated body and,
// for a .json file, one that does not parse.
func copyChecked(dst string, resp *http.Response) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(resp.Body, maxHubFile+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) && resp.ContentLength >= 0:
		return fmt.Errorf("truncated: %d of the %d bytes announced", n, resp.ContentLength)
	case err != nil:
		return err
	case n > maxHubFile:
		return fmt.Errorf("larger than %d bytes", maxHubFile)
	case resp.ContentLength >= 0 && n != resp.ContentLength:
		return fmt.Errorf("truncated: %d of the %d bytes announced", n, resp.ContentLength)
	}
	if strings.HasSuffix(dst, ".json") {
		data, err := os.ReadFile(dst)
		if err != nil {
			return err
		}
		if !json.Valid(data) {
			return fmt.Errorf("refused: not valid JSON (%d bytes)", n)
		}
	}
	return nil
}

// token is the hub token: HubTokenFile's content, read at each download so
// that a rotated secret is used, else HubToken.
func (r *Registry) token() (string, error) {
	if r.cfg.HubTokenFile == "" {
		return r.cfg.HubToken, nil
	}
	b, err := os.ReadFile(r.cfg.HubTokenFile)
	if err != nil {
		return "", fmt.Errorf("token file (HubTokenFile): %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// staleAfter is how old a temporary download directory must be to be
// surely abandoned (its process killed): longer than any download takes.
func staleAfter(timeout time.Duration) time.Duration {
	return max(time.Hour, time.Duration(len(hubFiles)+1)*timeout)
}

// removeStale removes the temporary download directories in cache older
// than before, left by processes killed midway.
func removeStale(cache string, before time.Time) {
	entries, err := os.ReadDir(cache)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), ".download-") {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(before) {
			_ = os.RemoveAll(filepath.Join(cache, e.Name()))
		}
	}
}
