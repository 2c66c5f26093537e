// image_folder_source: reads the files of an image folder DIR/CLASS/IMAGE
// as they are (decoding is image_decode's job), with the class index as
// label. Files are sharded across replicas. Config:
// topology.ImageFolderSourceConfig.
#pragma once

#include "actorflow/runtime/stage/registry.hpp"

namespace af {

stage_type image_folder_source_type();

} // namespace af
