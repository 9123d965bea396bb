package aws_test

import (
	"os"
	"path/filepath"
	"testing"

	_ "github.com/soulstack/soulstack/internal/modules/standard"
	"github.com/soulstack/soulstack/internal/scenario"
)

// TestExampleValidates: examples/aws.yaml, the scenario a user with real
// credentials runs, validates and plans with the inputs the docs give.
func TestExampleValidates(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "aws.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scenario.Check("aws.yaml", src); err != nil {
		t.Fatalf("examples/aws.yaml does not validate:\n%v", err)
	}
	plan, err := scenario.Load("aws.yaml", src, map[string]any{"image_id": "ami-0123456789abcdef0", "subnet_id": "subnet-0123456789abcdef0", "security_group_id": "sg-0123456789abcdef0"})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Steps) != 3 || plan.Steps[0].ID != "core.cloud.created" || plan.Steps[2].ID != "core.cloud.destroyed" {
		t.Fatalf("plan steps: %+v", plan.Steps)
	}
	if _, err := scenario.Load("aws.yaml", src, map[string]any{"subnet_id": "subnet-0123456789abcdef0"}); err == nil {
		t.Fatal("the example loads without its image_id input")
	}
}
