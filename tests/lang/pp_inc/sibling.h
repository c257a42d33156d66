#pragma once
#define SIBLING 7
