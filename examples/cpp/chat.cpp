// A one-turn chat that streams its reply through packlm::Detokenizer.
// Usage: chat MODEL [PROMPT] [MAX_TOKENS]
#include "packlm.hpp"

#include <cstdio>
#include <cstdlib>
#include <iostream>

int main(int argc, char **argv) {
    if (argc < 2) {
        std::cerr << "usage: " << argv[0] << " MODEL [PROMPT] [MAX_TOKENS]\n";
        return 2;
    }
    const std::string prompt = argc > 2 ? argv[2] : "What is the capital of France?";
    const long max_tokens = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 64;
    try {
        packlm::Model model(argv[1]);
        packlm::Session session(model);
        packlm::Detokenizer stream(model, PACKLM_DETOKENIZE_SKIP_SPECIAL);
        // A pack without a chat template gets the prompt as it is.
        const std::string text = model.info().has_chat_template ? model.chat_apply({{"user", prompt}}) : prompt;
        std::vector<float> logits = session.step_batch(model.tokenize(text));
        for (long i = 0; i < max_tokens; ++i) {
            const uint32_t token = packlm::argmax(logits);
            if (model.is_stop(token)) break;
            std::cout << stream.feed(token) << std::flush;
            logits = session.step(token);
        }
        std::cout << stream.flush() << std::endl;
    } catch (const packlm::Error &e) {
        std::cerr << "error " << e.status() << ": " << e.what() << "\n";
        return 1;
    }
    return 0;
}
