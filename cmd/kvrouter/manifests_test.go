package main

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestManifestsConfig builds the kustomizations in manifests/,
// manifests-redis/ and manifests-gie/ and runs the kvrouter Deployment's configuration through
// serve's own loading: its args (with $(VAR) from its ConfigMaps) and the
// config file its --config names, read from the ConfigMap mounted there,
// load and validate.
func TestManifestsConfig(t *testing.T) {
	t.Run("manifests", func(t *testing.T) {
		s := manifestsSettings(t, "../../manifests")
		if s.disc.Pool.Name != "" {
			t.Errorf("manifests/ serves the pool %s, want the selector", s.disc.Pool)
		}
	})
	t.Run("manifests-redis", func(t *testing.T) {
		s := manifestsSettings(t, "../../manifests-redis")
		if s.redis == nil || len(s.redis.Addrs) != 1 || s.redis.Addrs[0] != "kvrouter-redis:6379" {
			t.Errorf("manifests-redis/ index backend = %+v, want redis at the kvrouter-redis Service", s.redis)
		}
		if s.redis != nil && s.redis.TTL != 0 {
			t.Errorf("manifests-redis/ block key TTL = %v, want 0: its server's allkeys-lfu policy bounds them", s.redis.TTL)
		}
	})
	t.Run("manifests-gie", func(t *testing.T) {
		s := manifestsSettings(t, "../../manifests-gie")
		if want := "placeholder/vllm-qwen3"; s.disc.Pool.String() != want { // POD_NAMESPACE/the pool
			t.Errorf("manifests-gie/ serves the pool %q, want %q", s.disc.Pool, want)
		}
	})
}

func manifestsSettings(t *testing.T, dir string) settings {
	t.Helper()
	_, s, templates := deploymentSettings(t, kustomizeDocs(t, dir))
	if s.Shutdown.DrainDelay <= 0 || s.Tokenizers.HFCache != "/hf-cache" || s.disc.Kubeconfig == "" {
		t.Errorf("the manifests' kvrouter configuration = %+v, want a drain delay, the /hf-cache tokenizers and discovery", s.config)
	}
	if len(templates) == 0 {
		t.Errorf("the manifests give no model a chat template from a ConfigMap")
	}
	return s
}

// kustomizeDocs builds the kustomization in dir: its objects' YAML.
func kustomizeDocs(t *testing.T, dir string) [][]byte {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	var docs [][]byte
	for _, r := range res.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, y)
	}
	return docs
}

// deploymentSettings runs the configuration of the kvrouter Deployment
// among docs (Kubernetes objects in YAML) through serve's own loading: its
// args (with $(VAR) from its ConfigMaps) and the config file its --config
// names, read from the ConfigMap mounted there, load and validate. It
// returns the loaded config, the settings, and the chat templates the
// config names, by model, as the temporary files they were written to.
func deploymentSettings(t *testing.T, docs [][]byte) (config, settings, map[string]string) {
	t.Helper()
	var d *appsv1.Deployment
	cms := map[string]*corev1.ConfigMap{}
	for _, y := range docs {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := sigsyaml.Unmarshal(y, &meta); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case meta.Kind == "Deployment" && meta.Metadata.Labels["app.kubernetes.io/name"] == "kvrouter":
			d = new(appsv1.Deployment)
			err = sigsyaml.UnmarshalStrict(y, d)
		case meta.Kind == "ConfigMap":
			cm := new(corev1.ConfigMap)
			err = sigsyaml.UnmarshalStrict(y, cm)
			cms[cm.Name] = cm
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if d == nil {
		t.Fatal("no kvrouter Deployment")
	}
	c := d.Spec.Template.Spec.Containers[0]
	args := expandArgs(t, c, cms)
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("kvrouter args = %q, want serve first", args)
	}
	found := false
	for i, a := range args {
		if path, ok := strings.CutPrefix(a, "--config="); ok {
			args[i] = "--config=" + mountedFile(t, d.Spec.Template.Spec, c, cms, path)
			found = true
		}
	}
	if !found {
		t.Fatalf("kvrouter args %q have no --config=", args)
	}
	cfg, err := loadConfig(args[1:])
	if err != nil {
		t.Fatalf("serve %q: %v", args[1:], err)
	}
	loaded := cfg
	// The chat templates the config names are files of mounted ConfigMaps.
	templates := map[string]string{}
	models := maps.Clone(cfg.Tokenizers.Models)
	for name, m := range models {
		if strings.HasPrefix(m.ChatTemplate, "/") {
			file := mountedFile(t, d.Spec.Template.Spec, c, cms, m.ChatTemplate)
			m.ChatTemplate, templates[name] = file, file
			models[name] = m
		}
	}
	cfg.Tokenizers.Models = models
	// Files of mounted Secrets: present, with stand-in content.
	for _, f := range []*string{&cfg.ExtProc.TLS.CertFile, &cfg.ExtProc.TLS.KeyFile, &cfg.Index.Redis.PasswordFile} {
		if *f != "" {
			*f = secretFile(t, d.Spec.Template.Spec, c, *f)
		}
	}
	s, err := cfg.validate("10.0.0.1") // in a pod: discovery in-cluster
	if err != nil {
		t.Fatalf("the kvrouter configuration: %v", err)
	}
	for name, file := range templates {
		if o := s.chats[name]; o.Template == "" || !strings.Contains(o.Source, file) {
			t.Errorf("model %s's chat options = %+v, want the template mounted at %s", name, o, file)
		}
	}
	return loaded, s, templates
}

var varRef = regexp.MustCompile(`\$\(([A-Z_]+)\)`)

// expandArgs substitutes $(VAR) in c's args as the kubelet does, from its
// envFrom ConfigMaps and env (a field reference becomes a placeholder).
func expandArgs(t *testing.T, c corev1.Container, maps map[string]*corev1.ConfigMap) []string {
	t.Helper()
	vars := map[string]string{}
	for _, e := range c.EnvFrom {
		cm := maps[e.ConfigMapRef.Name]
		if cm == nil {
			t.Fatalf("envFrom ConfigMap %s does not exist", e.ConfigMapRef.Name)
		}
		for k, v := range cm.Data {
			vars[k] = v
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			vars[e.Name] = e.Value
		} else {
			vars[e.Name] = "placeholder"
		}
	}
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		out[i] = varRef.ReplaceAllStringFunc(a, func(ref string) string {
			v, ok := vars[ref[2:len(ref)-1]]
			if !ok {
				t.Errorf("arg %q uses an undefined variable", a)
			}
			return v
		})
	}
	return out
}

// mountedVolume returns the volume mounted in c at path's directory, and
// path's file name there.
func mountedVolume(t *testing.T, spec corev1.PodSpec, c corev1.Container, path string) (corev1.Volume, string) {
	t.Helper()
	dir, key := filepath.Split(path)
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) != filepath.Clean(dir) {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name {
				return v, key
			}
		}
		t.Fatalf("volume %s mounted at %s does not exist", m.Name, dir)
	}
	t.Fatalf("no volume is mounted at %s", dir)
	return corev1.Volume{}, ""
}

// tempFile writes data to a temporary file named name and returns its path.
func tempFile(t *testing.T, name, data string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// mountedFile finds the ConfigMap key mounted at path in c and writes it to
// a temporary file, returning that file's path.
func mountedFile(t *testing.T, spec corev1.PodSpec, c corev1.Container, maps map[string]*corev1.ConfigMap, path string) string {
	t.Helper()
	v, key := mountedVolume(t, spec, c, path)
	if v.ConfigMap == nil {
		t.Fatalf("volume %s at %s is not a ConfigMap", v.Name, path)
	}
	cm := maps[v.ConfigMap.Name]
	if cm == nil {
		t.Fatalf("volume %s: ConfigMap %s does not exist", v.Name, v.ConfigMap.Name)
	}
	data, ok := cm.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s for %s", cm.Name, key, path)
	}
	return tempFile(t, key, data)
}

// secretFile checks that a Secret volume mounted in c provides path and
// returns a temporary file that stands in for it.
func secretFile(t *testing.T, spec corev1.PodSpec, c corev1.Container, path string) string {
	t.Helper()
	v, key := mountedVolume(t, spec, c, path)
	if v.Secret == nil {
		t.Fatalf("volume %s at %s is not a Secret", v.Name, path)
	}
	provided := len(v.Secret.Items) == 0 // every key of the Secret
	for _, it := range v.Secret.Items {
		provided = provided || it.Path == key
	}
	if !provided {
		t.Fatalf("Secret volume %s does not provide %s", v.Name, path)
	}
	return tempFile(t, key, "stand-in")
}
