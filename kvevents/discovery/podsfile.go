package discovery

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/kvrouter/kvrouter/internal/conf"
	"github.com/kvrouter/kvrouter/internal/pod"
)

// podsDoc is the pods file.
type podsDoc struct {
	Pods []pod.Entry `yaml:"pods"`
}

// ParsePodsFile decodes a pods file (data, read from path) strictly and checks
// its pods, and that none takes a static pod's name. It returns the file's
// pods and its problems.
func ParsePodsFile(path string, data []byte, static []pod.Pod, defaultModel string) ([]pod.Pod, []string) {
	var doc podsDoc
	list, positions := conf.DecodeYAML(path, data, &doc, nil)
	pods, more := pod.FromEntries("pods", doc.Pods, defaultModel)
	for _, m := range more {
		if where := positions.Locate(path, m); where != m {
			list = append(list, where)
		} else {
			list = append(list, path+": "+m)
		}
	}
	for _, q := range pods {
		if slices.ContainsFunc(static, func(s pod.Pod) bool { return s.Name == q.Name }) {
			list = append(list, fmt.Sprintf("%s: pod %q is also a static pod", path, q.Name))
		}
	}
	return pods, list
}

// ReadPodsFile reads and checks a pods file: its pods and its problems.
func ReadPodsFile(path string, static []pod.Pod, defaultModel string) ([]pod.Pod, []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, []string{err.Error()}
	}
	return ParsePodsFile(path, data, static, defaultModel)
}

// PodsFileParser is ParsePodsFile for the pods file at path, its problems
// joined in one error.
func PodsFileParser(path string, static []pod.Pod, defaultModel string) ParseFunc {
	return func(data []byte) ([]pod.Pod, error) {
		pods, list := ParsePodsFile(path, data, static, defaultModel)
		if len(list) > 0 {
			return nil, errors.New(strings.Join(list, "; "))
		}
		return pods, nil
	}
}
