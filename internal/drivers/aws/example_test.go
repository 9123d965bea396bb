package aws_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/soulstack/soulstack/driversdk"
	"github.com/soulstack/soulstack/internal/drivers/aws"
	"github.com/soulstack/soulstack/internal/expr"
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
	params, err := plan.Steps[0].Params(context.Background(), expr.Vars{Input: plan.Input})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Provider string          `json:"provider"`
		Count    int             `json:"count"`
		Profile  json.RawMessage `json:"profile"`
	}
	if err := json.Unmarshal(params, &got); err != nil || got.Provider != "aws" || got.Count != 1 {
		t.Fatalf("params %s: %v", params, err)
	}
	// The rendered profile is one the driver accepts.
	d := aws.New(nil)
	prov := driversdk.Provider{Name: "aws", Region: "eu-central-1", Credentials: credentialsJSON()}
	if err := d.ValidateProfile(context.Background(), prov, got.Profile); err != nil {
		t.Fatalf("the example's profile %s: %v", got.Profile, err)
	}
	if _, err := scenario.Load("aws.yaml", src, map[string]any{"subnet_id": "subnet-0123456789abcdef0"}); err == nil {
		t.Fatal("the example loads without its image_id input")
	}
}
