//! Builder images with realistic CNB labels (shaped like the Paketo jammy and Heroku builders),
//! as test images to push.

use serde_json::json;

use super::images::Image;

#[derive(Debug, Clone)]
pub struct BuilderSpec {
    /// (id, version, layer diff id)
    pub buildpacks: Vec<(String, String, String)>,
    pub lifecycle: String,
    pub stack_id: String,
    pub run_image: String,
    pub run_mirrors: Vec<String>,
    /// Diff ids of the layers that are not buildpacks'.
    pub base: Vec<String>,
    pub order: Vec<String>,
    pub description: String,
    pub arch: String,
    /// false: an image without CNB labels at all.
    pub cnb: bool,
}

fn s(text: &str) -> String {
    text.to_string()
}

impl BuilderSpec {
    pub fn jammy(run_image: &str) -> Self {
        BuilderSpec {
            buildpacks: vec![
                (s("paketo-buildpacks/java"), s("18.1.0"), s("sha256:java-18.1.0")),
                (s("paketo-buildpacks/nodejs"), s("7.2.0"), s("sha256:nodejs-7.2.0")),
                (s("paketo-buildpacks/go"), s("4.14.0"), s("sha256:go-4.14.0")),
            ],
            lifecycle: s("0.21.13"),
            stack_id: s("io.buildpacks.stacks.jammy"),
            run_image: run_image.into(),
            run_mirrors: vec![],
            base: vec![s("sha256:build-jammy-base-1"), s("sha256:lifecycle-0.21.13")],
            order: vec![s("paketo-buildpacks/java"), s("paketo-buildpacks/nodejs"), s("paketo-buildpacks/go")],
            description: s("Ubuntu 22.04 Jammy Jellyfish base image with buildpacks for Java, Go, Node.js"),
            arch: s("amd64"),
            cnb: true,
        }
    }

    pub fn heroku(run_image: &str) -> Self {
        BuilderSpec {
            buildpacks: vec![
                (s("heroku/nodejs"), s("3.2.1"), s("sha256:heroku-nodejs-3.2.1")),
                (s("heroku/python"), s("0.19.1"), s("sha256:heroku-python-0.19.1")),
            ],
            lifecycle: s("0.21.12"),
            stack_id: s("heroku-24"),
            run_image: run_image.into(),
            run_mirrors: vec![s("public.ecr.aws/heroku/heroku:24")],
            base: vec![s("sha256:heroku-24-build-1")],
            order: vec![s("heroku/nodejs"), s("heroku/python")],
            description: s("Ubuntu 24.04 AMD64+ARM64 base image with buildpacks for Node.js and Python"),
            arch: s("amd64"),
            cnb: true,
        }
    }

    pub fn bump(mut self, id: &str, version: &str) -> Self {
        let bp = self.buildpacks.iter_mut().find(|b| b.0 == id).expect("buildpack in spec");
        bp.1 = version.into();
        bp.2 = format!("sha256:{id}-{version}").replace('/', "-");
        self
    }

    pub fn arch(mut self, arch: &str) -> Self {
        self.arch = arch.into();
        self
    }

    pub fn image(&self) -> Image {
        let mut image = Image::new(&self.arch).salt(&format!("{:?}", self));
        if !self.cnb {
            return image;
        }
        let run = json!({ "image": self.run_image, "mirrors": self.run_mirrors });
        let metadata = json!({
            "description": self.description,
            "buildpacks": self.buildpacks.iter().map(|(id, v, _)| json!({"id": id, "version": v})).collect::<Vec<_>>(),
            "stack": { "runImage": run },
            "images": [run],
            "lifecycle": { "version": self.lifecycle,
                "apis": { "buildpack": {"deprecated": [], "supported": ["0.7", "0.10", "0.11"]},
                          "platform": {"deprecated": [], "supported": ["0.7", "0.12", "0.13", "0.14"]} } },
            "createdBy": { "name": "Pack CLI", "version": "0.38.2" },
        });
        let mut layers = serde_json::Map::new();
        for (id, v, diff) in &self.buildpacks {
            let entry = layers.entry(id.clone()).or_insert_with(|| json!({}));
            entry[v.as_str()] = json!({"api": "0.10", "layerDiffID": diff});
        }
        let order: Vec<_> = self.order.iter().map(|id| json!({"group": [{"id": id}]})).collect();
        image = image
            .label("io.buildpacks.builder.metadata", metadata.to_string())
            .label("io.buildpacks.stack.id", self.stack_id.clone())
            .label("io.buildpacks.stack.mixins", "[]")
            .label("io.buildpacks.buildpack.layers", serde_json::Value::Object(layers).to_string())
            .label("io.buildpacks.buildpack.order", serde_json::Value::Array(order).to_string())
            .env("CNB_USER_ID=1001")
            .env("CNB_GROUP_ID=1000");
        let mut diff_ids = self.base.clone();
        diff_ids.extend(self.buildpacks.iter().map(|b| b.2.clone()));
        image.diff_ids = Some(diff_ids);
        image
    }
}
