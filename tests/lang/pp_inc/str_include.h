// Included through a stringized macro argument (preproc.nb).
float from_stringized() { return 5; }
